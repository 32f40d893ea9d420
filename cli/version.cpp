#include "cli/version.h"

#include <sys/stat.h>

#include <string>

#include "cli/build_info.h"
#include "cli/runtime_library.h"
#include "runtime/model/wing_library.h"

namespace cleave::cli {

void printVersion(std::ostream& out) {
  using namespace build_info;
  const std::string cuda = *kTorchCudaVersion ? std::string(kTorchCudaVersion) : "";
  out << "cleave " << kCleaveVersion << "\n";
  out << "libtorch " << kTorchVersion << (cuda.empty() ? " (CPU only)" : " (CUDA " + cuda + ")") << "\n";
  out << "ONNX " << kOnnxVersion << "\n";
  if (*kOneDnnVersion)
    out << "oneDNN " << kOneDnnVersion << " (the CPU wing's products and convolutions)\n";
  else
    out << "oneDNN: not called directly (products and convolutions on ATen)\n";
  if (!kCudaWingBuilt) {
    out << "CUDA wing: absent (" << (cuda.empty() ? "libtorch has no CUDA" : "not built") << ")\n";
    return;
  }
  const std::string path = executableFolder() + runtime::kCudaWingLibrary;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0)
    out << "CUDA wing: missing (built, but " << path << " is not there)\n";
  else
    out << "CUDA wing: present (" << path << "; CUDA " << cuda << ", NCCL " << kNcclVersion << ")\n";
}

} // namespace cleave::cli
