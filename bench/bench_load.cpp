// bench/bench_load.cpp - read an ONNX model into the IR and verify it; report time and memory.
//
//   bench_load MODEL [--repeat N]
//
// Prints one line per phase (protobuf parse alone, the whole readOnnx, verifyGraph) with seconds,
// nanoseconds per node and peak resident memory (bytes per node). The protobuf-only phase is the
// floor any libonnx-based reader pays; the ratio read/parse says what cleave adds on top.
#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

#include "base/resources.h"
#include "io/onnx.h"

namespace {
double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_load MODEL [--parse-only-first]\n");
    return 2;
  }
  std::string path = argv[1];
  bool parseFirst = argc > 2 && std::strcmp(argv[2], "--parse-only-first") == 0;
  double parseSeconds = -1;
  if (parseFirst) {
    auto start = std::chrono::steady_clock::now();
    google::protobuf::Arena arena;
    auto* model = google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
    int fd = ::open(path.c_str(), O_RDONLY);
    google::protobuf::io::FileInputStream stream(fd);
    google::protobuf::io::CodedInputStream coded(&stream);
    coded.SetTotalBytesLimit(INT32_MAX);
    bool ok = model->ParseFromCodedStream(&coded);
    ::close(fd);
    parseSeconds = seconds(start);
    std::printf("protobuf parse only: %.3f s (%s)\n", parseSeconds, ok ? "ok" : "failed");
  }
  long rssBefore = static_cast<long>(cleave::peakResidentBytes());
  auto start = std::chrono::steady_clock::now();
  cleave::Expected<cleave::ir::Graph> graph = cleave::io::readOnnx(path);
  double readSeconds = seconds(start);
  if (!graph) {
    std::fprintf(stderr, "bench_load: %s\n", graph.error().message().c_str());
    return 1;
  }
  start = std::chrono::steady_clock::now();
  cleave::Status verified = cleave::ir::verifyGraph(*graph);
  double verifySeconds = seconds(start);
  if (!verified) {
    std::fprintf(stderr, "bench_load: %s\n", verified.error().message().c_str());
    return 1;
  }
  double nodes = graph->numNodes();
  long peak = static_cast<long>(cleave::peakResidentBytes());
  std::printf("nodes: %.0f\n", nodes);
  std::printf("read (parse + build IR): %.3f s, %.0f ns/node\n", readSeconds, readSeconds * 1e9 / nodes);
  std::printf("verify: %.3f s, %.0f ns/node\n", verifySeconds, verifySeconds * 1e9 / nodes);
  std::printf("total: %.3f s, %.0f ns/node\n", readSeconds + verifySeconds,
              (readSeconds + verifySeconds) * 1e9 / nodes);
  std::printf("peak memory: %.1f MiB, %.0f bytes/node%s\n", peak / 1048576.0, peak / nodes,
              parseFirst && rssBefore > 0 ? " (includes the parse-only phase's peak)" : "");
  return 0;
}
