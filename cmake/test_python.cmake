# cmake/test_python.cmake - CLEAVE_TEST_PYTHON, the interpreter of the Python tests and of the
# sanitizer build's unit-test wrapper (tests/testlib.py): scripts/setup's virtual environment.
# Chosen at every configure unless given (-DCLEAVE_PYTHON=...), so that a folder configured before
# scripts/setup made .venv picks it up on the next configure instead of keeping python3.
set(CLEAVE_PYTHON "" CACHE STRING "The Python that runs the end-to-end tests (default: .venv's)")
if(CLEAVE_PYTHON)
  set(CLEAVE_TEST_PYTHON ${CLEAVE_PYTHON})
elseif(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python3)
  set(CLEAVE_TEST_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python3)
else()
  set(CLEAVE_TEST_PYTHON python3)
  message(STATUS "cleave: no .venv (run scripts/setup); the end-to-end tests use python3 from PATH")
endif()
