#include "io/onnx.h"

#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <optional>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <cstring>
#include <unistd.h>

#include "base/file_io.h"
#include "gen/families.h"
#include "io/exporter_signature.h"
#include "io/fixed_batch.h"
#include "io/fixed_parameters.h"
#include "io/model_loader.h"
#include "ir/printer.h"

namespace cleave::io {
namespace {
namespace fs = std::filesystem;

class OnnxTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cleave_onnx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes `graph`, checks it with onnx's full check, reads it back, compares the text forms.
  void expectRoundTrip(const ir::Graph& graph, const std::string& name, OnnxWriteOptions options = {}) {
    std::string file = path(name);
    Status written = writeOnnx(graph, file, options);
    ASSERT_TRUE(written) << written.error().message();
    Status checked = checkOnnxFile(file);
    ASSERT_TRUE(checked) << checked.error().message();
    Expected<ir::Graph> back = readOnnx(file);
    ASSERT_TRUE(back) << back.error().message();
    // ONNX lists initializers before nodes, so only the order of lines may differ.
    EXPECT_EQ(sortedLines(ir::printGraph(*back)), sortedLines(ir::printGraph(graph))) << name;
    ASSERT_EQ(back->numParameters(), graph.numParameters());
    for (std::uint32_t p = 0; p < graph.numParameters(); ++p) {
      const ir::Parameter& param = graph.parameter(ir::ParamId{p});
      ir::NodeId node = back->findNode(param.name);
      ASSERT_NE(node, ir::NodeId{UINT32_MAX}) << param.name;
      Expected<std::string> a = graph.readParameterData(ir::ParamId{p});
      Expected<std::string> b = back->readParameterData(back->parameters(node)[0]);
      ASSERT_TRUE(a && b);
      EXPECT_EQ(*a, *b) << param.name;
    }
    // A second round trip changes nothing at all, order included.
    ASSERT_TRUE(writeOnnx(*back, file + ".again.onnx", options));
    Expected<ir::Graph> again = readOnnx(file + ".again.onnx");
    ASSERT_TRUE(again);
    EXPECT_EQ(ir::printGraph(*again), ir::printGraph(*back));
  }

  static std::vector<std::string> sortedLines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);)
      lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
  }

public:
  // `info` declares a float tensor of shape [2].
  static void declareFloatPair(onnx::ValueInfoProto* info, const std::string& name) {
    info->set_name(name);
    auto* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_value(2);
  }

protected:

  // A minimal model x -> Relu -> y that tests then break in one way each.
  static onnx::ModelProto reluModel() {
    onnx::ModelProto model;
    model.set_ir_version(8);
    model.add_opset_import()->set_version(17);
    onnx::GraphProto* graph = model.mutable_graph();
    graph->set_name("g");
    declareFloatPair(graph->add_input(), "x");
    declareFloatPair(graph->add_output(), "y");
    onnx::NodeProto* node = graph->add_node();
    node->set_name("relu");
    node->set_op_type("Relu");
    node->add_input("x");
    node->add_output("y");
    return model;
  }
  std::string save(const onnx::ModelProto& model, const std::string& name) {
    std::string file = path(name);
    std::ofstream out(file, std::ios::binary);
    model.SerializeToOstream(&out);
    return file;
  }

  fs::path dir_;
};

TEST_F(OnnxTest, EveryGeneratedFamilyRoundTripsAndPassesTheFullCheck) {
  for (const gen::FamilyInfo& family : gen::listFamilies()) {
    Expected<ir::Graph> graph = gen::generateFamily(family.name, 3);
    ASSERT_TRUE(graph) << graph.error().message();
    expectRoundTrip(*graph, std::string(family.name) + ".onnx");
  }
}

TEST_F(OnnxTest, EveryExampleModelRoundTripsAndPassesTheFullCheck) {
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(CLEAVE_SOURCE_DIR) / "examples")) {
    if (entry.path().extension() != ".onnx")
      continue;
    Expected<ir::Graph> graph = readOnnx(entry.path().string());
    ASSERT_TRUE(graph) << graph.error().message();
    expectRoundTrip(*graph, entry.path().filename().string());
    ++seen;
  }
  EXPECT_GE(seen, 3);
}

TEST_F(OnnxTest, ExternalDataIsWrittenBesideTheModelAndReadLazily) {
  Expected<ir::Graph> graph = gen::generateFamily("linear_chain", 4);
  ASSERT_TRUE(graph);
  expectRoundTrip(*graph, "external.onnx", {.externalDataThreshold = 1024});
  EXPECT_TRUE(fs::exists(path("external.onnx.data")));
  Expected<ir::Graph> back = readOnnx(path("external.onnx"));
  ASSERT_TRUE(back);
  const ir::Parameter& weight = back->parameter(back->parameters(back->findNode("layers.0.weight"))[0]);
  EXPECT_EQ(weight.data.source, ir::ParameterData::Source::External);
  EXPECT_EQ(weight.bytes, 32 * 32 * 4);
}

TEST_F(OnnxTest, MissingExternalDataIsAnErrorNamingTheParameter) {
  Expected<ir::Graph> graph = gen::generateFamily("linear_chain", 2);
  ASSERT_TRUE(graph);
  ASSERT_TRUE(writeOnnx(*graph, path("m.onnx"), {.externalDataThreshold = 1024}));
  fs::remove(path("m.onnx.data"));
  Expected<ir::Graph> back = readOnnx(path("m.onnx")); // lazy: reading the graph still works
  ASSERT_TRUE(back);
  Expected<std::string> data = back->readParameterData(back->parameters(back->findNode("layers.0.weight"))[0]);
  ASSERT_FALSE(data);
  EXPECT_NE(data.error().message().find("layers.0.weight"), std::string::npos);
}

TEST_F(OnnxTest, ShapeInferenceFillsMissingTypes) {
  onnx::ModelProto model = reluModel();
  onnx::NodeProto* second = model.mutable_graph()->add_node();
  second->set_op_type("Relu"); // unnamed: gets a generated name
  second->add_input("y");
  second->add_output("z");
  model.mutable_graph()->mutable_output(0)->set_name("z");
  model.mutable_graph()->mutable_node(0)->set_output(0, "y");
  Expected<ir::Graph> graph = readOnnx(save(model, "infer.onnx"));
  ASSERT_TRUE(graph) << graph.error().message();
  ir::ValueId y = graph->findValue("y");
  EXPECT_EQ(graph->dtype(y), ir::DType::F32);
  EXPECT_EQ(graph->bytes(y), 8);
  EXPECT_NE(graph->findNode("Relu_0"), ir::NodeId{UINT32_MAX});
}

// Shape inference runs on a copy without large initializers' data (their dtype and dims are what
// it reads); a small integer initializer that data propagation reads keeps its values.
TEST_F(OnnxTest, ShapeInferenceTypesLargeInitializersWithoutTheirData) {
  onnx::ModelProto model = reluModel(); // x [2] -> Relu -> y
  onnx::GraphProto* graph = model.mutable_graph();
  onnx::TensorProto* weight = graph->add_initializer(); // [2, 16384] floats: 128 KiB
  weight->set_name("w");
  weight->set_data_type(onnx::TensorProto::FLOAT);
  weight->add_dims(2);
  weight->add_dims(16384);
  std::string weightBytes(2 * 16384 * 4, '\0');
  for (std::size_t i = 0; i < weightBytes.size(); ++i)
    weightBytes[i] = static_cast<char>(i * 7);
  weight->set_raw_data(weightBytes);
  onnx::TensorProto* shape = graph->add_initializer(); // Reshape's target, read by propagation
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(2);
  const std::int64_t target[] = {128, 256};
  shape->set_raw_data(std::string(reinterpret_cast<const char*>(target), sizeof target));
  auto addNode = [&](const std::string& op, std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type(op);
    for (const std::string& input : inputs)
      node->add_input(input);
    node->add_output(output);
  };
  addNode("MatMul", {"y", "w"}, "p");      // [2] x [2, 16384] -> [16384], untyped in the file
  addNode("Reshape", {"p", "shape"}, "r"); // [128, 256]
  graph->mutable_output(0)->set_name("r");
  graph->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  Expected<ir::Graph> read = readOnnx(save(model, "large.onnx"));
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->dtype(read->findValue("p")), ir::DType::F32);
  EXPECT_EQ(read->bytes(read->findValue("p")), 16384 * 4);
  EXPECT_EQ(read->bytes(read->findValue("r")), 128 * 256 * 4);
  ASSERT_EQ(read->dims(read->findValue("r")).size(), 2u);
  EXPECT_EQ(read->dims(read->findValue("r"))[0].extent, 128);
  // The parameter itself is read whole, in place and copied.
  ir::ParamId w = read->parameters(read->producer(read->findValue("w")))[0];
  EXPECT_EQ(*read->readParameterData(w), weightBytes);
  ASSERT_TRUE(read->parameterDataInMemory(w).has_value());
  EXPECT_EQ(*read->parameterDataInMemory(w), weightBytes);
}

TEST_F(OnnxTest, MissingFileIsNotFound) {
  Expected<ir::Graph> graph = loadModel(path("absent.onnx"));
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().code(), ErrorCode::NotFound);
  EXPECT_NE(graph.error().message().find("absent.onnx"), std::string::npos);
}

TEST_F(OnnxTest, TruncatedFileIsAParseError) {
  Expected<ir::Graph> source = gen::generateFamily("chain", 4);
  ASSERT_TRUE(source);
  ASSERT_TRUE(writeOnnx(*source, path("full.onnx")));
  Expected<std::string> bytes = readFile(path("full.onnx"));
  ASSERT_TRUE(bytes);
  ASSERT_TRUE(writeFileAtomically(path("cut.onnx"), bytes->substr(0, bytes->size() / 2)));
  Expected<ir::Graph> graph = readOnnx(path("cut.onnx"));
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().code(), ErrorCode::ParseError);
  EXPECT_NE(graph.error().message().find("cut.onnx"), std::string::npos);
}

TEST_F(OnnxTest, GarbageIsAParseError) {
  ASSERT_TRUE(writeFileAtomically(path("junk.onnx"), std::string("\xff\xff\xff\xff garbage", 12)));
  Expected<ir::Graph> graph = readOnnx(path("junk.onnx"));
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().code(), ErrorCode::ParseError);
}

TEST_F(OnnxTest, OldOpsetsAreConvertedAndTooOldOrNewOnesRefused) {
  onnx::ModelProto model = reluModel();
  model.mutable_opset_import(0)->set_version(9);
  Expected<ir::Graph> converted = readOnnx(save(model, "old.onnx"));
  ASSERT_TRUE(converted) << converted.error().message();
  EXPECT_EQ(converted->modelInfo().convertedFromOpset, 9);
  EXPECT_EQ(converted->modelInfo().opsetImports[0].second, kMinOnnxOpset);
  for (std::int64_t version : {std::int64_t{0}, kMaxOnnxOpset + 1}) {
    model.mutable_opset_import(0)->set_version(version);
    Expected<ir::Graph> graph = readOnnx(save(model, "refused.onnx"));
    ASSERT_FALSE(graph);
    EXPECT_EQ(graph.error().code(), ErrorCode::Unsupported);
    EXPECT_NE(graph.error().message().find("opset " + std::to_string(version)), std::string::npos);
  }
}

// kMaxOnnxOpset names the newest opset of the ONNX library cleave links: a newer library (new
// semantics to follow) fails here until its ops are audited and the constant raised.
TEST_F(OnnxTest, NewestOpsetIsTheOnnxLibrarys) {
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  ASSERT_TRUE(ranges.count(""));
  EXPECT_EQ(ranges.at("").second, kMaxOnnxOpset);
}

TEST_F(OnnxTest, EveryNewerOpsetReadsAndTypes) {
  for (std::int64_t version = 19; version <= kMaxOnnxOpset; ++version) {
    onnx::ModelProto model = reluModel();
    model.set_ir_version(version >= 21 ? 10 : 9);
    model.mutable_opset_import(0)->set_version(version);
    model.mutable_graph()->clear_output();
    onnx::ValueInfoProto* output = model.mutable_graph()->add_output();
    output->set_name("y"); // untyped: onnx's inference at this opset types it
    Expected<ir::Graph> graph = readOnnx(save(model, "new.onnx"));
    ASSERT_TRUE(graph) << version << ": " << graph.error().message();
    EXPECT_EQ(graph->modelInfo().opsetImports[0].second, version);
    ir::ValueId y = graph->outputs(graph->findNode("relu"))[0];
    EXPECT_EQ(graph->valueType(y).dtype, ir::DType::F32) << version;
  }
}

TEST_F(OnnxTest, UnknownDtypeIsNamed) {
  onnx::ModelProto model = reluModel();
  onnx::TensorProto* init = model.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(99);
  Expected<ir::Graph> graph = readOnnx(save(model, "dtype.onnx"));
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().code(), ErrorCode::ParseError);
  EXPECT_NE(graph.error().message().find("initializer 'w' has unknown data type 99"), std::string::npos);
}

TEST_F(OnnxTest, CycleIsNamed) {
  onnx::ModelProto model = reluModel();
  onnx::GraphProto* graph = model.mutable_graph();
  graph->mutable_node(0)->set_op_type("Add");
  graph->mutable_node(0)->add_input("back");
  onnx::NodeProto* back = graph->add_node();
  back->set_name("loopback");
  back->set_op_type("Relu");
  back->add_input("y");
  back->add_output("back");
  Expected<ir::Graph> result = readOnnx(save(model, "cycle.onnx"), {.shapeInference = ShapeInference::Never});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), ErrorCode::InvalidGraph);
  EXPECT_NE(result.error().message().find("cycle"), std::string::npos);
  EXPECT_NE(result.error().message().find("'loopback'"), std::string::npos);
}

TEST_F(OnnxTest, DanglingInputIsNamed) {
  onnx::ModelProto model = reluModel();
  model.mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
  Expected<ir::Graph> graph = readOnnx(save(model, "dangling.onnx"), {.shapeInference = ShapeInference::Never});
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("input 'nowhere' names no value"), std::string::npos);
}

TEST_F(OnnxTest, DuplicateValueNamesAreRejected) {
  onnx::ModelProto model = reluModel();
  onnx::NodeProto* again = model.mutable_graph()->add_node();
  again->set_name("relu2");
  again->set_op_type("Relu");
  again->add_input("x");
  again->add_output("y");
  Expected<ir::Graph> graph = readOnnx(save(model, "dup.onnx"), {.shapeInference = ShapeInference::Never});
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("duplicate value name 'y'"), std::string::npos);
}

TEST_F(OnnxTest, InitializerWithWrongByteCountIsRejected) {
  onnx::ModelProto model = reluModel();
  onnx::TensorProto* init = model.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(onnx::TensorProto::FLOAT);
  init->add_dims(4);
  init->set_raw_data(std::string(7, '\0'));
  Expected<ir::Graph> graph = readOnnx(save(model, "bytes.onnx"));
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("'w' holds 7 bytes"), std::string::npos);
}

TEST_F(OnnxTest, TypedFieldInitializersBecomeRawBytes) {
  onnx::ModelProto model = reluModel();
  onnx::TensorProto* init = model.mutable_graph()->add_initializer();
  init->set_name("shape");
  init->set_data_type(onnx::TensorProto::INT64);
  init->add_dims(2);
  init->add_int64_data(3);
  init->add_int64_data(-1);
  Expected<ir::Graph> graph = readOnnx(save(model, "typed.onnx"));
  ASSERT_TRUE(graph) << graph.error().message();
  Expected<std::string> data = graph->readParameterData(graph->parameters(graph->findNode("shape"))[0]);
  ASSERT_TRUE(data);
  std::int64_t values[2];
  ASSERT_EQ(data->size(), sizeof values);
  std::memcpy(values, data->data(), sizeof values);
  EXPECT_EQ(values[0], 3);
  EXPECT_EQ(values[1], -1);
}

// A BatchNormalization's running mean and variance are buffers (never trained), also through an
// Identity alias; its scale and shift are trained.
TEST_F(OnnxTest, NormalizationStatisticsAreBuffers) {
  onnx::ModelProto model = reluModel();
  onnx::GraphProto* graph = model.mutable_graph();
  for (const char* name : {"scale", "shift", "mean", "var"}) {
    onnx::TensorProto* init = graph->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_dims(1);
    init->add_float_data(1.0f);
  }
  onnx::NodeProto* alias = graph->add_node();
  alias->set_op_type("Identity");
  alias->add_input("var");
  alias->add_output("var_alias");
  onnx::NodeProto* norm = graph->add_node();
  norm->set_op_type("BatchNormalization");
  for (const char* input : {"y", "scale", "shift", "mean", "var_alias"})
    norm->add_input(input);
  norm->add_output("z");
  Expected<ir::Graph> read = readOnnx(save(model, "norm.onnx"));
  ASSERT_TRUE(read) << read.error().message();
  auto isBuffer = [&](const char* name) {
    return read->parameter(read->parameters(read->findNode(name))[0]).isBuffer();
  };
  EXPECT_FALSE(isBuffer("scale"));
  EXPECT_FALSE(isBuffer("shift"));
  EXPECT_TRUE(isBuffer("mean"));
  EXPECT_TRUE(isBuffer("var"));
  EXPECT_TRUE(isBuffer("var_alias"));
}

// A float initializer `name` of one element, read by an Add of the relu model's y.
void addFloatReadByAdd(onnx::GraphProto& graph, const std::string& name) {
  onnx::TensorProto* init = graph.add_initializer();
  init->set_name(name);
  init->set_data_type(onnx::TensorProto::FLOAT);
  init->add_dims(1);
  init->add_float_data(1.0f);
  onnx::NodeProto* add = graph.add_node();
  add->set_op_type("Add");
  add->add_input("y");
  add->add_input(name);
  add->add_output("sum_" + name);
}

// The model's cleave.fixed_parameters entry (io/fixed_parameters.h) holds its tensors fixed, with
// their reasons; cleave writes it back with every reason it knows, so they survive a write and a
// read (a folded value stays folded); a damaged entry is a parse error naming the key.
TEST_F(OnnxTest, TheFixedParametersEntryHoldsTensorsFixedAndRoundTrips) {
  onnx::ModelProto model = reluModel();
  onnx::GraphProto* graph = model.mutable_graph();
  for (const char* name : {"weight", "inv_freq", "table"})
    addFloatReadByAdd(*graph, name);
  auto* entry = model.add_metadata_props();
  entry->set_key("cleave.fixed_parameters");
  entry->set_value(R"({"version": 1, "buffers_listed": true, "fixed": {"inv_freq": "buffer", "table": "folded", "gone": "buffer"}})");
  Expected<ir::Graph> read = readOnnx(save(model, "listed.onnx"));
  ASSERT_TRUE(read) << read.error().message();
  auto fixedOf = [](const ir::Graph& g, const char* name) {
    return g.parameter(g.parameters(g.findNode(name))[0]).fixed;
  };
  EXPECT_EQ(fixedOf(*read, "weight"), ir::Fixed::Trains);
  EXPECT_EQ(fixedOf(*read, "inv_freq"), ir::Fixed::Buffer);
  EXPECT_EQ(fixedOf(*read, "table"), ir::Fixed::Folded);
  EXPECT_TRUE(read->modelInfo().buffersListed);
  ASSERT_TRUE(writeOnnx(*read, path("again.onnx")));
  Expected<ir::Graph> again = readOnnx(path("again.onnx"));
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(fixedOf(*again, "inv_freq"), ir::Fixed::Buffer);
  EXPECT_EQ(fixedOf(*again, "table"), ir::Fixed::Folded);
  EXPECT_TRUE(again->modelInfo().buffersListed);
  for (const char* damaged : {R"({"version": 2, "fixed": {}})", R"({"version": 1, "fixed": {"table": "trains"}})",
                              R"({"version": 1, "fixed": {"table": "weights"}})",
                              R"({"version": 1, "fixed": {}, "untrainable": 3})", "[1"}) {
    entry->set_value(damaged);
    Expected<ir::Graph> refused = readOnnx(save(model, "damaged.onnx"));
    ASSERT_FALSE(refused) << damaged;
    EXPECT_EQ(refused.error().code(), ErrorCode::ParseError) << damaged;
    EXPECT_NE(refused.error().message().find("cleave.fixed_parameters"), std::string::npos) << refused.error().message();
  }
}

// torch.onnx's dynamo exporter notes on each initializer's value_info (IR 10's metadata_props,
// field 4, which onnx 1.12's classes lack: written here as unknown fields) the program
// signature's kind and, for onnxscript's folds, their sources. Buffers and folds of constants are
// held fixed; a parameter, and a weight folded from one module tensor (transposed), train.
TEST_F(OnnxTest, TheDynamoExportersNotesHoldBuffersAndFoldedConstantsFixed) {
  onnx::ModelProto model = reluModel();
  onnx::GraphProto* graph = model.mutable_graph();
  struct Noted {
    std::string name, key, value;
  };
  const std::string kind(kExportedKindKey), folded(kFoldedFromKey);
  const std::vector<Noted> notes = {{"blocks.0.q.weight", kind, "PARAMETER"},
                                    {"mask", kind, "BUFFER"},
                                    {"attn.lifted_tensor_0", kind, "CONSTANT_TENSOR"},
                                    {"triu", folded, "['full', 'val_0', 'val_1']"},
                                    {"val_25", folded, "['blocks.0.k.weight']"},
                                    {"val_26", folded, "['val_3']"},
                                    {"unnoted", "", ""}};
  for (const auto& [name, key, value] : notes) {
    addFloatReadByAdd(*graph, name);
    if (key.empty())
      continue;
    onnx::ValueInfoProto* info = graph->add_value_info();
    info->set_name(name);
    onnx::StringStringEntryProto entry;
    entry.set_key(key);
    entry.set_value(value);
    info->GetReflection()->MutableUnknownFields(info)->AddLengthDelimited(4, entry.SerializeAsString());
  }
  Expected<ir::Graph> read = readOnnx(save(model, "dynamo.onnx"));
  ASSERT_TRUE(read) << read.error().message();
  auto fixedOf = [&](const std::string& name) {
    return read->parameter(read->parameters(read->findNode(name))[0]).fixed;
  };
  EXPECT_EQ(fixedOf("blocks.0.q.weight"), ir::Fixed::Trains);
  EXPECT_EQ(fixedOf("mask"), ir::Fixed::Buffer);
  EXPECT_EQ(fixedOf("attn.lifted_tensor_0"), ir::Fixed::Buffer);
  EXPECT_EQ(fixedOf("triu"), ir::Fixed::Folded);
  EXPECT_EQ(fixedOf("val_25"), ir::Fixed::Trains); // a transposed weight trains in its place
  EXPECT_EQ(fixedOf("val_26"), ir::Fixed::Folded);
  // With the signature noted, an initializer without notes is the optimizer's literal.
  EXPECT_EQ(fixedOf("unnoted"), ir::Fixed::Constant);
  EXPECT_TRUE(read->modelInfo().buffersListed); // the exporter wrote the program's signature
  EXPECT_EQ(read->modelInfo().exporterFolds, 3u);
  // Written and read again, the literal stays fixed (the written model lists it).
  const std::string written = path("dynamo_written.onnx");
  ASSERT_TRUE(writeOnnx(*read, written));
  Expected<ir::Graph> again = readOnnx(written);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->parameter(again->parameters(again->findNode("unnoted"))[0]).fixed, ir::Fixed::Constant);
}

namespace {
void noteOn(google::protobuf::Message& message, int field, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto entry;
  entry.set_key(key);
  entry.set_value(value);
  message.GetReflection()->MutableUnknownFields(&message)->AddLengthDelimited(field, entry.SerializeAsString());
}

// A dynamo export's LayerNormalization of FX node `fx` whose scale and bias inputs are the
// initializers `scale` and `bias` (merged), its placeholders `p_<module>_weight`, `p_<module>_bias`.
void addNotedLayerNorm(onnx::GraphProto& graph, const std::string& fx, const std::string& module,
                       const std::string& scale, const std::string& bias) {
  onnx::NodeProto* node = graph.add_node();
  node->set_op_type("LayerNormalization");
  node->set_name("node_" + fx);
  node->add_input("x");
  node->add_input(scale);
  node->add_input(bias);
  node->add_output(fx);
  std::string spelled = module;
  std::replace(spelled.begin(), spelled.end(), '.', '_');
  noteOn(*node, 9, "pkg.torch.onnx.fx_node",
         "%" + fx + " : [num_users=1] = call_function[target=torch.ops.aten.layer_norm.default](args = (%x, [2], %p_" +
             spelled + "_weight, %p_" + spelled + "_bias, 1e-05), kwargs = {})");
  noteOn(*node, 9, "pkg.torch.onnx.name_scopes", "['', '" + module + "', 'layer_norm']");
}

onnx::ModelProto mergedLayerNorms(bool notedNodes) {
  onnx::ModelProto model;
  model.set_ir_version(10);
  model.add_opset_import()->set_version(20);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("g");
  OnnxTest::declareFloatPair(graph->add_input(), "x");
  for (const auto& [name, value] : {std::pair<std::string, float>{"ln_a.weight", 1.0f}, {"ln_a.bias", 0.0f}}) {
    onnx::TensorProto* init = graph->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_dims(2);
    init->add_float_data(value);
    init->add_float_data(value);
    onnx::ValueInfoProto* info = graph->add_value_info();
    info->set_name(name);
    noteOn(*info, 4, "pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER");
    noteOn(*info, 4, "pkg.torch.onnx.original_node_name", name == "ln_a.weight" ? "p_ln_a_weight" : "p_ln_a_bias");
  }
  // ln_b's and blocks.0.ln's weight and bias were merged into ln_a's.
  addNotedLayerNorm(*graph, "layer_norm", "ln_a", "ln_a.weight", "ln_a.bias");
  addNotedLayerNorm(*graph, "layer_norm_1", "ln_b", "ln_a.weight", "ln_a.bias");
  addNotedLayerNorm(*graph, "layer_norm_2", "blocks.0.ln", "ln_a.weight", "ln_a.bias");
  if (!notedNodes) // a node without notes reads a merged tensor: nothing says whose it is
    graph->mutable_node(2)->GetReflection()->MutableUnknownFields(graph->mutable_node(2))->Clear();
  for (const char* out : {"layer_norm", "layer_norm_1", "layer_norm_2"})
    OnnxTest::declareFloatPair(graph->add_output(), out);
  return model;
}
} // namespace

// The dynamo exporter's optimizer merges parameters of equal value (every fresh LayerNorm's
// weight of ones): each is given its own tensor again, named by its module path, read by exactly
// the nodes whose FX node names its placeholder; a node without notes leaves it untrainable.
TEST_F(OnnxTest, MergedParametersOfADynamoExportTrainApart) {
  Expected<ir::Graph> read = readOnnx(save(mergedLayerNorms(true), "merged.onnx"));
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->modelInfo().exporterMergesSplit, 4u);
  EXPECT_TRUE(read->modelInfo().untrainable.empty()) << read->modelInfo().untrainable;
  auto readsOf = [&](const char* node) {
    std::vector<std::string> names;
    for (ir::ValueId value : read->inputs(read->findNode(node)))
      names.emplace_back(read->valueName(value));
    return names;
  };
  EXPECT_EQ(readsOf("node_layer_norm"), (std::vector<std::string>{"x", "ln_a.weight", "ln_a.bias"}));
  EXPECT_EQ(readsOf("node_layer_norm_1"), (std::vector<std::string>{"x", "ln_b.weight", "ln_b.bias"}));
  EXPECT_EQ(readsOf("node_layer_norm_2"), (std::vector<std::string>{"x", "blocks.0.ln.weight", "blocks.0.ln.bias"}));
  const ir::Parameter& copy = read->parameter(read->parameters(read->findNode("blocks.0.ln.weight"))[0]);
  EXPECT_EQ(copy.fixed, ir::Fixed::Trains);
  EXPECT_EQ(copy.data, read->parameter(read->parameters(read->findNode("ln_a.weight"))[0]).data); // same bytes

  Expected<ir::Graph> unnoted = readOnnx(save(mergedLayerNorms(false), "merged_unnoted.onnx"));
  ASSERT_TRUE(unnoted) << unnoted.error().message();
  EXPECT_EQ(unnoted->modelInfo().exporterMergesSplit, 0u);
  EXPECT_NE(unnoted->modelInfo().untrainable.find("ln_a.weight"), std::string::npos) << unnoted->modelInfo().untrainable;
  // The reason survives a write (a plan's stages): training the stages refuses too.
  const std::string written = path("merged_written.onnx");
  ASSERT_TRUE(writeOnnx(*unnoted, written));
  Expected<ir::Graph> again = readOnnx(written);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->modelInfo().untrainable, unnoted->modelInfo().untrainable);
}

TEST(ExporterSignature, PlaceholdersNameTheirModulePaths) {
  EXPECT_EQ(parameterNameOfPlaceholder("p_blocks_0_ln1_weight", "['', 'blocks.0', 'blocks.0.ln1', 'layer_norm']"),
            "blocks.0.ln1.weight");
  EXPECT_EQ(parameterNameOfPlaceholder("p_gain", "['', 'mul']"), "gain");
  EXPECT_EQ(parameterNameOfPlaceholder("p_other_weight", "['', 'blocks.0']"), "other_weight");
}

TEST_F(OnnxTest, SubgraphCapturesBecomeImplicitInputs) {
  Expected<ir::Graph> graph = readOnnx(std::string(CLEAVE_SOURCE_DIR) + "/examples/dlrm.onnx");
  ASSERT_TRUE(graph) << graph.error().message();
  int loops = 0;
  for (std::uint32_t n = 0; n < graph->numNodes(); ++n) {
    ir::NodeId node{n};
    if (graph->opType(node) != "Loop")
      continue;
    ++loops;
    EXPECT_GT(graph->numImplicitInputs(node), 0u) << graph->name(node);
    EXPECT_EQ(graph->scope(node).substr(0, 11), "embeddings.");
  }
  EXPECT_EQ(loops, 3);
}

// The scanner reads untrusted bytes: every prefix of a real model must give an error or a
// graph that verifies, never a crash (scripts/test runs this under ASan + UBSan).
TEST_F(OnnxTest, ReaderSurvivesTruncationAtAnyOffset) {
  Expected<std::string> bytes = readFile(std::string(CLEAVE_SOURCE_DIR) + "/examples/dlrm.onnx");
  ASSERT_TRUE(bytes);
  std::size_t step = bytes->size() / 997 + 1, failures = 0, reads = 0;
  for (std::size_t cut = 1; cut < bytes->size(); cut += step) {
    ASSERT_TRUE(writeFileAtomically(path("cut.onnx"), bytes->substr(0, cut)));
    Expected<ir::Graph> graph = readOnnx(path("cut.onnx"), {.shapeInference = ShapeInference::Never});
    ++reads;
    if (!graph)
      ++failures;
    else
      EXPECT_TRUE(ir::verifyGraph(*graph)) << "cut at " << cut;
  }
  EXPECT_GT(failures, reads * 9 / 10);
}

TEST_F(OnnxTest, ReaderSurvivesRandomByteFlips) {
  Expected<std::string> bytes = readFile(std::string(CLEAVE_SOURCE_DIR) + "/examples/dlrm.onnx");
  ASSERT_TRUE(bytes);
  std::uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  std::size_t failures = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::string mutated = *bytes;
    for (int flips = 1 + static_cast<int>(next() >> 62); flips > 0; --flips)
      mutated[(next() >> 33) % mutated.size()] = static_cast<char>(next() >> 56);
    ASSERT_TRUE(writeFileAtomically(path("flip.onnx"), mutated));
    Expected<ir::Graph> graph = readOnnx(path("flip.onnx"), {.shapeInference = ShapeInference::Never});
    if (!graph) {
      ++failures;
      EXPECT_FALSE(graph.error().message().empty());
    } else {
      EXPECT_TRUE(ir::verifyGraph(*graph)) << "trial " << trial;
      for (std::uint32_t p = 0; p < graph->numParameters(); ++p)
        (void)graph->readParameterData(ir::ParamId{p}); // in bounds or an error, never a crash
    }
  }
  EXPECT_GT(failures, 0u);
}

TEST_F(OnnxTest, ParametersStayInTheModelFileUntilRead) {
  Expected<ir::Graph> graph = readOnnx(std::string(CLEAVE_SOURCE_DIR) + "/examples/cnn.onnx");
  ASSERT_TRUE(graph);
  const ir::Parameter& weight = graph->parameter(graph->parameters(graph->findNode("stem.weight"))[0]);
  EXPECT_EQ(weight.data.source, ir::ParameterData::Source::ModelFile);
  EXPECT_EQ(weight.data.length, 16u * 3 * 3 * 3 * 4);
  Expected<std::string> data = graph->readParameterData(graph->parameters(graph->findNode("stem.weight"))[0]);
  ASSERT_TRUE(data);
  EXPECT_EQ(data->size(), weight.data.length);
}

TEST_F(OnnxTest, FxGraphsCannotBeWrittenAsOnnx) {
  Expected<ir::Graph> graph = loadModel(std::string(CLEAVE_SOURCE_DIR) + "/examples/cnn.fx.json");
  ASSERT_TRUE(graph) << graph.error().message();
  Status written = writeOnnx(*graph, path("fx.onnx"));
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error().code(), ErrorCode::Unsupported);
  EXPECT_FALSE(fs::exists(path("fx.onnx")));
}

TEST_F(OnnxTest, ScopesComeFromTorchNodeNames) {
  Expected<ir::Graph> graph = readOnnx(std::string(CLEAVE_SOURCE_DIR) + "/examples/cnn.onnx");
  ASSERT_TRUE(graph);
  ir::NodeId conv = graph->findNode("/layer1/layer1.0/conv1/Conv");
  ASSERT_NE(conv, ir::NodeId{UINT32_MAX});
  EXPECT_EQ(graph->scope(conv), "layer1.0.conv1");
}


// x [4, 6] -> Reshape(x, target) or Relu(x) -> y, as a static-batch export writes it.
onnx::ModelProto reshapeOfRows(std::optional<std::vector<std::int64_t>> target) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name("rows");
  onnx::ValueInfoProto& x = *graph.add_input();
  x.set_name("x");
  x.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (std::int64_t extent : {4, 6})
    x.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(extent);
  onnx::NodeProto& node = *graph.add_node();
  node.set_name("/op");
  node.add_input("x");
  node.add_output("y");
  node.set_op_type(target ? "Reshape" : "Relu");
  if (target) {
    onnx::TensorProto& shape = *graph.add_initializer();
    shape.set_name("target");
    shape.set_data_type(onnx::TensorProto::INT64);
    shape.add_dims(static_cast<std::int64_t>(target->size()));
    for (std::int64_t extent : *target)
      shape.add_int64_data(extent);
    node.add_input("target");
  }
  graph.add_output()->set_name("y");
  return model;
}

TEST_F(OnnxTest, TheBatchAnalysisOfAModelAsReadAnswersAsTheWholeAnalysis) {
  struct Case {
    std::optional<std::vector<std::int64_t>> target;
    std::size_t holders;
  };
  for (const Case& c : {Case{std::vector<std::int64_t>{2, 12}, 1}, Case{std::vector<std::int64_t>{-1, 12}, 0},
                        Case{std::vector<std::int64_t>{0, 6}, 0}, Case{std::nullopt, 0}}) {
    const std::string file = path("rows.onnx");
    std::ofstream(file, std::ios::binary) << reshapeOfRows(c.target).SerializeAsString();
    Expected<ir::Graph> graph = loadModel(file);
    ASSERT_TRUE(graph) << graph.error().message();
    Expected<FixedBatch> whole = findFixedBatch(file), asRead = findFixedBatch(file, *graph);
    ASSERT_TRUE(whole && asRead);
    EXPECT_EQ(whole->holders.size(), c.holders);
    EXPECT_EQ(asRead->holders.size(), c.holders);
    EXPECT_EQ(asRead->batch, 4);
    EXPECT_EQ(whole->batch, asRead->batch);
    EXPECT_EQ(whole->batchedInputs, asRead->batchedInputs);
    EXPECT_EQ(asRead->batchedInputs, std::vector<std::string>{"x"});
  }
}

} // namespace
} // namespace cleave::io
