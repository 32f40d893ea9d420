#include "runtime/distributed/communicator.h"
#include "runtime/distributed/transport.h"
#include "runtime/model/wing_library.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "runtime/engine/kernel.h"
#include "base/resources.h"
#include "base/strings.h"

namespace cleave::runtime::distributed {

namespace {
constexpr std::int64_t kMaxRank = 16; // dims a header carries
// A header: dtype, rank, kMaxRank dims, and the message's tag (checked in-order matching).
constexpr std::int64_t kHeaderLength = 3 + kMaxRank;
// In-order matching numbers each channel's messages; the transport's tags for them wrap below 2^30.
constexpr std::uint64_t kSequenceWrap = std::uint64_t{1} << 29;
// The store keys of the first failure: a counter (the first launcher to add 1 writes the
// message) and the message itself.
constexpr const char* kFailureCount = "cleave/failures";
constexpr const char* kFirstFailure = "cleave/first-failure";
// How long a rank whose operation failed waits for a launcher's announcement: a launcher polls
// its ranks every 100 ms and reaches the store in well under a second.
constexpr std::chrono::milliseconds kAnnouncementGrace{2000};

// The world's ranks, 0 .. worldSize - 1: the members of the group every rank joins at connect.
std::vector<int> worldMembers(int worldSize) {
  std::vector<int> members(static_cast<std::size_t>(worldSize));
  std::iota(members.begin(), members.end(), 0);
  return members;
}

// Filled before main by the wings' transports (Gloo's: runtime/cpu/gloo_transport.cpp).
std::map<std::string, TransportFactory>& transportRegistry() {
  static std::map<std::string, TransportFactory> registry;
  return registry;
}

// Point-to-point messages (shape headers, shape keys, posted receives, matching) and reductions
// over any transport.
class GroupCommunicator final : public Communicator {
public:
  // `members`: the world rank of each of the group's ranks (the world: 0 .. worldSize - 1).
  GroupCommunicator(c10::intrusive_ptr<c10d::Store> store, std::unique_ptr<Transport> transport, DistributedEnv env,
                    std::vector<int> members)
      : store_(std::move(store)), transport_(std::move(transport)), env_(std::move(env)), members_(std::move(members)) {
    groupRank_ = static_cast<int>(std::find(members_.begin(), members_.end(), env_.rank) - members_.begin());
    if (!transport_->tagged())
      setMatching(ChannelMatching::InOrder);
  }

  int rank() const override { return groupRank_; }
  int worldSize() const override { return static_cast<int>(members_.size()); }

  // The transport's tag 2t carries the header, 2t + 1 the data; t is the caller's tag, or under
  // in-order matching the message's number on its channel.
  Status send(const at::Tensor& original, int dst, std::uint32_t tag, std::uint64_t shapeKey) override {
    at::Tensor tensor = denseFromPrivateLayout(original).to(transport_->device()).contiguous();
    if (tensor.dim() > kMaxRank)
      return Error(ErrorCode::Unsupported) << "a tensor of rank " << tensor.dim() << " (at most " << kMaxRank << ")";
    std::string what = "send to rank " + std::to_string(members_.at(static_cast<std::size_t>(dst)));
    const int headerTag = 2 * nextWireTag(sentOnChannel_[dst], tag), dataTag = headerTag + 1;
    bool shapeUnknown = true; // at the receiver: its header carries the shape
    if (shapeKey) {
      auto [known, fresh] = sentShapes_.try_emplace({dst, shapeKey}, tensor.scalar_type(), tensor.sizes().vec());
      shapeUnknown = fresh;
      if (!fresh && (known->second.first != tensor.scalar_type() || known->second.second != tensor.sizes().vec()))
        return Error(ErrorCode::InvalidArgument)
               << "rank " << env_.rank << ": " << what << " (tag " << tag << "): a " << tensor.scalar_type()
               << c10::str(tensor.sizes()) << " where its shape key says " << known->second.first
               << c10::str(at::IntArrayRef(known->second.second))
               << " (from the plan, or the key's first message: the same value for microbatches of the same rows)";
      if (!fresh && matching_ != ChannelMatching::InOrderChecked)
        return guarded(what, [&] { post(tensor, dst, dataTag); });
    }
    at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
    header[0] = static_cast<std::int64_t>(tensor.scalar_type());
    header[1] = tensor.dim();
    for (std::int64_t d = 0; d < tensor.dim(); ++d)
      header[2 + d] = tensor.size(d);
    header[kHeaderLength - 1] = static_cast<std::int64_t>(tag);
    header = header.to(transport_->device());
    if (shapeUnknown) // not a checked channel's header for a shape already known
      ++headersSent_;
    return guarded(what, [&] {
      post(header, dst, headerTag);
      post(tensor, dst, dataTag);
    });
  }

  void setMatching(ChannelMatching matching) override {
    if (!transport_->tagged() && matching == ChannelMatching::ByTag)
      matching = ChannelMatching::InOrder; // it has no tags
    matching_ = matching == ChannelMatching::InOrder && env_.checkChannelOrder ? ChannelMatching::InOrderChecked : matching;
  }

  void declareShape(int peer, std::uint64_t shapeKey, at::ScalarType type, std::vector<std::int64_t> dims) override {
    sentShapes_.try_emplace({peer, shapeKey}, type, dims);
    receivedShapes_.try_emplace({peer, shapeKey}, type, std::move(dims));
  }

  Status postRecv(int src, std::uint32_t tag, std::uint64_t shapeKey) override {
    auto [slot, fresh] = posted_.try_emplace({src, tag});
    if (!fresh)
      return {};
    PostedRecv& posted = slot->second;
    posted.shapeKey = shapeKey;
    posted.wireTag = nextWireTag(receivedOnChannel_[src], tag);
    const bool checked = matching_ == ChannelMatching::InOrderChecked;
    auto known = shapeKey && !checked ? receivedShapes_.find({src, shapeKey}) : receivedShapes_.end();
    if (known != receivedShapes_.end())
      return postData(src, tag, posted, known->second.first, known->second.second);
    // An earlier message of this key carries the header (a channel keeps its order, as the
    // validator requires), so this one travels alone: its data is posted once that header is in.
    if (shapeKey && !checked && !headersPosted_.insert({src, shapeKey}).second)
      return {};
    posted.header = at::zeros({kHeaderLength}, at::TensorOptions().dtype(at::kLong).device(transport_->device()));
    return guarded(receiveName(src, tag), [&] { posted.headerWork = transport_->recv(posted.header, src, 2 * posted.wireTag); });
  }

  Expected<at::Tensor> recv(int src, std::uint32_t tag, std::uint64_t shapeKey) override {
    CLEAVE_CHECK(postRecv(src, tag, shapeKey));
    auto slot = posted_.find({src, tag});
    PostedRecv posted = std::move(slot->second);
    posted_.erase(slot);
    const std::string what = receiveName(src, tag);
    if (posted.headerWork) {
      CLEAVE_CHECK(guarded(what, [&] {
        posted.headerWork->wait(env_.timeout);
        posted.header = posted.header.to(at::kCPU); // (on a GPU, waits for the header's stream)
      }));
      const std::int64_t* h = posted.header.data_ptr<std::int64_t>();
      if (h[1] < 0 || h[1] > kMaxRank || h[0] < 0 || h[0] >= static_cast<std::int64_t>(at::ScalarType::NumOptions))
        return Error(ErrorCode::ParseError) << what << ": a corrupt tensor header";
      if (matching_ == ChannelMatching::InOrderChecked && h[kHeaderLength - 1] != static_cast<std::int64_t>(tag))
        return Error(ErrorCode::InvalidArgument)
               << "rank " << env_.rank << ": " << what << " met the message of tag " << h[kHeaderLength - 1]
               << ": receives posted in another order than the sender's sends (NCCL matches a channel's messages in order)";
      auto type = static_cast<at::ScalarType>(h[0]);
      std::vector<std::int64_t> dims(h + 2, h + 2 + h[1]);
      if (posted.shapeKey) {
        receivedShapes_[{src, posted.shapeKey}] = {type, dims};
        headersPosted_.erase({src, posted.shapeKey});
      }
      CLEAVE_CHECK(postData(src, tag, posted, type, dims));
    } else if (!posted.dataWork) { // posted behind its key's header, which has come in since
      auto known = receivedShapes_.find({src, posted.shapeKey});
      if (known == receivedShapes_.end())
        return Error(ErrorCode::InvalidArgument) << what << ": received before the message of its shape key that carries "
                                                 << "the header (a channel must keep its order)";
      CLEAVE_CHECK(postData(src, tag, posted, known->second.first, known->second.second));
    }
    CLEAVE_CHECK(guarded(what, [&] { posted.dataWork->wait(env_.timeout); }));
    return posted.data;
  }

  Status finish() override {
    Status status = guarded("waiting for sends", [&] {
      for (auto& [work, keep] : pending_)
        work->wait(env_.timeout);
    });
    pending_.clear();
    return status;
  }

  std::size_t headersSent() const override { return headersSent_; }
  ReceiveBufferStats receiveBuffers() const override { return buffers_.stats(); }
  void resetReceiveBufferPeak() override { buffers_.resetPeak(); }

  double transportCpuSeconds() const override {
    double seconds = 0.0;
    for (pid_t thread : transport_->threads())
      seconds += std::max(0.0, threadCpuSeconds(thread));
    return seconds;
  }

  Status barrier() override {
    return guarded("barrier", [&] { transport_->barrier()->wait(env_.timeout); });
  }

  Expected<std::vector<std::string>> exchangeText(const std::string& name, const std::string& text) override {
    const std::string prefix = "cleave/exchange/" + name + "/";
    std::vector<std::string> texts(members_.size());
    int waitingFor = env_.rank;
    Status exchanged = guarded("exchanging " + name, [&] {
      store_->set(prefix + std::to_string(env_.rank), std::vector<std::uint8_t>(text.begin(), text.end()));
      for (std::size_t r = 0; r < members_.size(); ++r) {
        waitingFor = members_[r];
        const std::string key = prefix + std::to_string(members_[r]);
        store_->wait({key}, env_.timeout);
        std::vector<std::uint8_t> bytes = store_->get(key);
        texts[r].assign(bytes.begin(), bytes.end());
      }
    });
    if (!exchanged)
      return Error(exchanged.error().code()) << exchanged.error().message() << " (waiting for rank " << waitingFor << ")";
    return texts;
  }

  // A tensor elsewhere than the transport's device is summed in a copy there, copied back.
  Status allReduceSum(at::Tensor& tensor) override {
    return guarded("all-reduce", [&] {
      at::Tensor moved = tensor.to(transport_->device());
      transport_->allReduceSum(moved)->wait(env_.timeout);
      if (!moved.is_same(tensor))
        tensor.copy_(moved);
    });
  }

  Status postAllReduceSum(const at::Tensor& tensor) override {
    if (tensor.device() != transport_->device())
      return Error(ErrorCode::InvalidArgument) << "an all-reduce posted on " << tensor.device() << " where the "
                                               << transport_->name() << " transport reduces on " << transport_->device();
    return guarded("all-reduce", [&] {
      at::Tensor target = tensor;
      pending_.push_back({transport_->allReduceSum(target), tensor});
    });
  }

  Expected<std::unique_ptr<Communicator>> subgroup(const std::string& name, const std::vector<int>& members) override {
    CLEAVE_TRY(std::vector<int> world, worldRanksOf(members));
    try {
      auto store = c10::make_intrusive<c10d::PrefixStore>("cleave/group/" + name + "/", store_);
      const int groupRank = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
      std::unique_ptr<Transport> transport = transport_->subgroup(store, groupRank, static_cast<int>(members.size()));
      return std::unique_ptr<Communicator>(
          std::make_unique<GroupCommunicator>(store_, std::move(transport), env_, std::move(world)));
    } catch (const std::exception& e) {
      return Error(ErrorCode::InvalidArgument) << "rank " << env_.rank << ": joining the group " << name
                                               << " failed (timeout " << env_.timeout.count()
                                               << " s): " << firstLine(e.what());
    }
  }

private:
  template <class Body> Status guarded(const std::string& what, Body body) {
    std::string detail;
    try {
      body();
      return {};
    } catch (const c10::Error& e) {
      detail = firstLine(e.what_without_backtrace());
    } catch (const std::exception& e) {
      detail = firstLine(e.what());
    }
    if (detail.find("imed out") != std::string::npos) // "Timed out", "timed out": not every one names the limit
      detail += " (timeout " + std::to_string(env_.timeout.count()) + " s)";
    Error error(ErrorCode::InvalidArgument);
    error << "rank " << env_.rank << ": " << what << " failed";
    if (std::string first = announcedFailure(); !first.empty())
      error << " after " << first << " (the run's first failure, announced by its launcher; here: " << detail << ")";
    else
      error << ": " << detail;
    return error;
  }

  // The run's first failure as a launcher announced it, waiting up to the grace; empty when none
  // came (no launcher, a hung peer, or the store itself gone with rank 0). Launchers announce
  // only to other hosts, so a run on one host does not wait. TCPStore's client waits for its
  // server's answer with no deadline of its own (torch 2.x: a wait on a store whose host is cut
  // off blocks in recv for good), so the wait runs on a thread of its own, holding its own
  // reference to the store, and is abandoned after the grace.
  std::string announcedFailure() {
    if (env_.oneHost())
      return {};
    const auto grace = std::min<std::chrono::milliseconds>(kAnnouncementGrace, env_.timeout);
    auto answer = std::make_shared<std::promise<std::string>>();
    std::future<std::string> announced = answer->get_future();
    std::thread([store = store_, answer, grace] {
      std::string first;
      try {
        store->wait({kFirstFailure}, grace);
        std::vector<std::uint8_t> bytes = store->get(kFirstFailure);
        first = std::string(firstLine(std::string(bytes.begin(), bytes.end())));
      } catch (const std::exception&) {
      }
      answer->set_value(std::move(first));
    }).detach();
    if (announced.wait_for(grace + std::chrono::seconds(1)) != std::future_status::ready)
      return {};
    return announced.get();
  }

  // A receive posted ahead: its header's (when its key has no shape yet), then its data's.
  struct PostedRecv {
    std::uint64_t shapeKey = 0;
    int wireTag = 0; // the caller's tag, or the message's number on its channel (nextWireTag())
    at::Tensor header, data;
    c10::intrusive_ptr<c10d::Work> headerWork, dataWork;
  };

  std::string receiveName(int src, std::uint32_t tag) const {
    return "receive from rank " + std::to_string(members_.at(static_cast<std::size_t>(src))) + " (tag " +
           std::to_string(tag) + ")";
  }

  // The world ranks of a subgroup's members (ranks of this group), checked.
  Expected<std::vector<int>> worldRanksOf(const std::vector<int>& members) const {
    std::vector<int> world;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i] < 0 || members[i] >= worldSize() || (i && members[i] <= members[i - 1]))
        return Error(ErrorCode::InvalidArgument) << "a group's members must be ascending ranks below " << worldSize();
      world.push_back(members_[static_cast<std::size_t>(members[i])]);
    }
    if (!std::binary_search(members.begin(), members.end(), rank()))
      return Error(ErrorCode::InvalidArgument) << "rank " << env_.rank << " joins a group it is not a member of";
    return world;
  }

  Status postData(int src, std::uint32_t tag, PostedRecv& posted, at::ScalarType type,
                  const std::vector<std::int64_t>& dims) {
    return guarded(receiveName(src, tag), [&] {
      posted.data = buffers_.take(type, dims, transport_->device());
      posted.dataWork = transport_->recv(posted.data, src, 2 * posted.wireTag + 1);
    });
  }

  // What a message's transport tags are made from: the caller's tag, or under in-order matching the
  // channel's next number (`counter` counts the channel's messages so far).
  int nextWireTag(std::uint64_t& counter, std::uint32_t tag) const {
    if (matching_ == ChannelMatching::ByTag)
      return static_cast<int>(tag);
    return static_cast<int>(counter++ % kSequenceWrap);
  }

  // Posts one send, keeping the tensor alive until it completes. Sends already done are let go
  // first, so a step does not hold every tensor it sent until finish() (recomputation's memory
  // saving would go into them); a failed one stays for finish() to report.
  void post(const at::Tensor& tensor, int dst, int tag) {
    std::erase_if(pending_, [](const auto& entry) { return entry.first->isCompleted() && !entry.first->exception(); });
    at::Tensor sent = tensor;
    pending_.push_back({transport_->send(sent, dst, tag), tensor});
  }

  c10::intrusive_ptr<c10d::Store> store_; // the world's rendezvous (subgroups' prefix it)
  std::unique_ptr<Transport> transport_;
  DistributedEnv env_; // the world's (its rank names this process in errors)
  std::vector<int> members_; // world rank by group rank
  int groupRank_ = 0;
  // Shapes by (peer, shape key) whose header has gone out / come in.
  std::map<std::pair<int, std::uint64_t>, std::pair<at::ScalarType, std::vector<std::int64_t>>> sentShapes_,
      receivedShapes_;
  std::size_t headersSent_ = 0;
  ReceiveBuffers buffers_; // what receives land in, reused
  ChannelMatching matching_ = ChannelMatching::ByTag;
  // In-order matching: messages sent to / receives posted from each peer so far.
  std::map<int, std::uint64_t> sentOnChannel_, receivedOnChannel_;
  // (peer, shape key) whose first message's header receive is posted and not yet in.
  std::set<std::pair<int, std::uint64_t>> headersPosted_;
  // Receives posted ahead by (peer, tag), until their recv().
  std::map<std::pair<int, std::uint32_t>, PostedRecv> posted_;
  // Posted sends with the tensors they read (kept alive until the send completes).
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor>> pending_;
};
class LocalCommunicator final : public Communicator {
public:
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  Status send(const at::Tensor&, int dst, std::uint32_t, std::uint64_t) override {
    return Error(ErrorCode::InvalidArgument) << "a single process has no rank " << dst << " to send to";
  }
  Expected<at::Tensor> recv(int src, std::uint32_t, std::uint64_t) override {
    return Error(ErrorCode::InvalidArgument) << "a single process has no rank " << src << " to receive from";
  }
  void declareShape(int, std::uint64_t, at::ScalarType, std::vector<std::int64_t>) override {}
  Status postRecv(int src, std::uint32_t, std::uint64_t) override {
    return Error(ErrorCode::InvalidArgument) << "a single process has no rank " << src << " to receive from";
  }
  Status finish() override { return {}; }
  void setMatching(ChannelMatching) override {}
  std::size_t headersSent() const override { return 0; }
  ReceiveBufferStats receiveBuffers() const override { return {}; }
  void resetReceiveBufferPeak() override {}
  double transportCpuSeconds() const override { return 0.0; }
  Status barrier() override { return {}; }
  Expected<std::vector<std::string>> exchangeText(const std::string&, const std::string& text) override {
    return std::vector<std::string>{text};
  }
  Status allReduceSum(at::Tensor&) override { return {}; }
  Status postAllReduceSum(const at::Tensor&) override { return {}; }
  Expected<std::unique_ptr<Communicator>> subgroup(const std::string&, const std::vector<int>& members) override {
    if (members != std::vector<int>{0})
      return Error(ErrorCode::InvalidArgument) << "a single process's only group is rank 0 alone";
    return local();
  }
};

} // namespace

std::unique_ptr<Communicator> Communicator::local() { return std::make_unique<LocalCommunicator>(); }

Expected<std::unique_ptr<Communicator>> Communicator::connect(const DistributedEnv& env) {
  return connect(env, kHostTransport);
}

Expected<std::unique_ptr<Communicator>> Communicator::connect(const DistributedEnv& env, const std::string& transport) {
  if (Status loaded = loadWingProviding(transport); !loaded)
    return Error(ErrorCode::InvalidArgument) << "transport '" << transport << "': " << loaded.error().message();
  auto factory = transportRegistry().find(transport);
  if (factory == transportRegistry().end())
    return Error(ErrorCode::InvalidArgument) << "no transport '" << transport << "' in this build (it has "
                                             << joinStrings(transportNames())
                                             << "; NCCL needs a libtorch with CUDA: scripts/gpu-build)";
  std::string where = env.masterAddr + ":" + std::to_string(env.masterPort);
  try {
    c10d::TCPStoreOptions options;
    options.port = env.masterPort;
    options.isServer = env.rank == 0;
    options.numWorkers = env.worldSize;
    options.timeout = env.timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(env.masterAddr, options);
    std::unique_ptr<Transport> made = factory->second(store, env);
    return std::unique_ptr<Communicator>(
        std::make_unique<GroupCommunicator>(std::move(store), std::move(made), env, worldMembers(env.worldSize)));
  } catch (const std::exception& e) {
    return Error(ErrorCode::InvalidArgument) << "rank " << env.rank << ": rendezvous at " << where << " failed (timeout "
                                             << env.timeout.count() << " s): " << firstLine(e.what());
  }
}

bool registerTransport(const std::string& name, TransportFactory factory) {
  transportRegistry()[name] = std::move(factory);
  return true;
}

std::vector<std::string> transportNames() {
  std::vector<std::string> names{kHostTransport};
  for (const auto& entry : transportRegistry())
    if (entry.first != kHostTransport)
      names.push_back(entry.first);
  return names;
}

void announceFailure(const std::string& masterAddr, std::uint16_t masterPort, const std::string& failure,
                     std::chrono::milliseconds patience) {
  // c10d logs a connect that fails to stderr (glog), which here is not an error of the run: its
  // log goes to /dev/null for the call. Changing fd 2 is why only a single-threaded caller may
  // use this.
  int savedStderr = dup(STDERR_FILENO), devNull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (savedStderr >= 0 && devNull >= 0)
    dup2(devNull, STDERR_FILENO);
  try {
    c10d::TCPStoreOptions options;
    options.port = masterPort;
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = patience;
    c10d::TCPStore store(masterAddr, options);
    if (store.add(kFailureCount, 1) == 1)
      store.set(kFirstFailure, std::vector<std::uint8_t>(failure.begin(), failure.end()));
  } catch (const std::exception&) {
    // The store is gone (rank 0 exited) or unreachable: the ranks report their own errors.
  }
  if (savedStderr >= 0 && devNull >= 0)
    dup2(savedStderr, STDERR_FILENO);
  for (int fd : {savedStderr, devNull})
    if (fd >= 0)
      close(fd);
}

} // namespace cleave::runtime::distributed
