// Fuzzes the schedule CSV reader (pipeline/schedule.cpp); accepted schedules are validated and,
// when valid, simulated (pipeline/schedule_sim.cpp).
#include "fuzz/fuzz_target.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_sim.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cleave::Expected<cleave::pipeline::Schedule> schedule = cleave::pipeline::parseCsv(fuzzText(data, size));
  if (schedule && cleave::pipeline::validateSchedule(*schedule))
    (void)cleave::pipeline::simulateSchedule(*schedule);
  return 0;
}
