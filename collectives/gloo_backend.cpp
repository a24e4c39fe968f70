// The gloo backend: the gloo library over TCP, one gloo context per group, ranks meeting
// through a file or TCP store (gloo_store.h). libtorch 1.13's ProcessGroupGloo lacks reduce_scatter and
// allgather_base, so this talks to gloo directly.
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "collectives/abort_cleanup.h"
#include "collectives/backend.h"
#include "collectives/gloo_store.h"
#include "collectives/launch_env.h"
#include "collectives/posted_work.h"
#include "collectives/transport_communicator.h"
#include "collectives/watchdog.h"
#include "common/error.h"

namespace titan {

namespace {

// Slot prefixes for our own point-to-point traffic; gloo's collectives use 0x01-0x08.
constexpr uint8_t kExchangeSlot = 0x40;
constexpr uint8_t kRingSlot = 0x41;
constexpr uint8_t kP2PSlot = 0x42;

// TITAN_GLOO_DEVICE_NICE (0-19, default 0): the nice value of gloo's device thread. Its event
// loop handles a readable socket only if it wins the pair's mutex (pthread_mutex_trylock in
// gloo's Pair::handleEvents) and otherwise polls again at once, so with more ranks than cores
// it spins on the core that the thread holding the mutex needs. Measured on 2 cores: a 1 KiB
// all-reduce took 3.7 ms on 4 ranks and 0.49 ms on 2 at nice 0, 1.1 ms and 0.22 ms at 19
// (docs/notes/bench_results.md). Where each rank has its cores, 0 keeps the thread level with
// the compute that fused collectives overlap; launch/titan-launch sets 19 when ranks outnumber
// cores.
int gloo_device_nice() {
  const char* v = std::getenv("TITAN_GLOO_DEVICE_NICE");
  if (!v || !*v) return 0;
  const int n = parse_env_int("TITAN_GLOO_DEVICE_NICE", v);
  TITAN_CONFIG_CHECK(n <= 19, "environment variable TITAN_GLOO_DEVICE_NICE=\"", v,
                     "\" is not a nice value (0-19)");
  return n;
}

std::set<std::string> thread_ids() {
  std::set<std::string> ids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ids.insert(e.path().filename());
  return ids;
}

// gloo gives no handle to the device's thread: it is the thread its creation added.
std::shared_ptr<gloo::transport::Device> create_device(const gloo::transport::tcp::attr& attr, int nice) {
  const std::set<std::string> before = nice > 0 ? thread_ids() : std::set<std::string>{};
  auto device = gloo::transport::tcp::CreateDevice(attr);
  if (nice > 0) {
    for (const std::string& id : thread_ids()) {
      if (before.count(id)) continue;
      TITAN_CHECK(setpriority(PRIO_PROCESS, static_cast<id_t>(std::stoul(id)), nice) == 0,
                  "gloo: cannot set the device thread's nice value to ", nice, ": ", std::strerror(errno));
    }
  }
  return device;
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

class GlooCommunicator : public TransportCommunicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> ctx, std::string name, std::vector<int> ranks,
                   int global_rank, CommOptions options)
      : TransportCommunicator(std::move(name), std::move(ranks), global_rank, std::move(options)),
        ctx_(std::move(ctx)),
        timeout_(to_ms(this->options().train_timeout_seconds)) {}
  ~GlooCommunicator() override { stop_progress(); }
  std::string backend() const override { return "gloo"; }

  gloo::Context& context() { return *ctx_; }

 protected:
  void exchange(const void* in, const std::vector<int64_t>& send_counts,
                const std::vector<int64_t>& send_displs, void* out,
                const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                size_t es) override {
    guarded([&] {
      const int n = size();
      int64_t in_end = 0, out_end = 0;
      for (int p = 0; p < n; ++p) {
        if (p == rank()) continue;
        in_end = std::max(in_end, send_displs[p] + send_counts[p]);
        out_end = std::max(out_end, recv_displs[p] + recv_counts[p]);
      }
      // Unbound buffers only read what they send, so dropping const is safe here.
      auto inbuf = ctx_->createUnboundBuffer(const_cast<void*>(in), in_end * es);
      auto outbuf = ctx_->createUnboundBuffer(out, out_end * es);
      const uint64_t slot = gloo::Slot::build(kExchangeSlot, next_tag());
      int sends = 0, recvs = 0;
      // Staggered peers (me+i, me-i) spread the load instead of everyone hitting rank 0.
      for (int i = 1; i < n; ++i) {
        const int to = (rank() + i) % n;
        const int from = (rank() - i + n) % n;
        if (recv_counts[from] > 0) {
          outbuf->recv(from, slot, recv_displs[from] * es, recv_counts[from] * es);
          ++recvs;
        }
        if (send_counts[to] > 0) {
          inbuf->send(to, slot, send_displs[to] * es, send_counts[to] * es);
          ++sends;
        }
      }
      for (int i = 0; i < recvs; ++i) outbuf->waitRecv(timeout_);
      for (int i = 0; i < sends; ++i) inbuf->waitSend(timeout_);
    });
  }

  // Ring all-gather: in step s a rank forwards the block it got in step s-1 to its right.
  void gather_in_place(void* buf, const std::vector<int64_t>& counts,
                       const std::vector<int64_t>& displs, size_t es) override {
    guarded([&] {
      const int n = size();
      const int right = (rank() + 1) % n;
      const int left = (rank() - 1 + n) % n;
      int64_t end = displs[n - 1] + counts[n - 1];
      auto ub = ctx_->createUnboundBuffer(buf, end * es);
      const uint64_t slot = gloo::Slot::build(kRingSlot, next_tag());
      for (int s = 0; s < n - 1; ++s) {
        const int send_block = (rank() - s + n) % n;
        const int recv_block = (rank() - s - 1 + n) % n;
        if (counts[recv_block] > 0)
          ub->recv(left, slot, displs[recv_block] * es, counts[recv_block] * es);
        if (counts[send_block] > 0)
          ub->send(right, slot, displs[send_block] * es, counts[send_block] * es);
        if (counts[recv_block] > 0) ub->waitRecv(timeout_);
        if (counts[send_block] > 0) ub->waitSend(timeout_);
      }
    });
  }

  void bcast(void* buf, int64_t count, size_t es, int root) override {
    guarded([&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<uint8_t*>(buf), count * es);
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  void send_raw(const void* buf, int64_t count, size_t es, int dst, int tag) override {
    guarded([&] {
      auto ub = ctx_->createUnboundBuffer(const_cast<void*>(buf), count * es);
      ub->send(dst, p2p_slot(tag));
      ub->waitSend(timeout_);
    });
  }

  void recv_raw(void* buf, int64_t count, size_t es, int src, int tag) override {
    guarded([&] {
      auto ub = ctx_->createUnboundBuffer(buf, count * es);
      ub->recv(src, p2p_slot(tag));
      ub->waitRecv(timeout_);
    });
  }

  // Fused mode: an unbound buffer's send / recv only posts the transfer (gloo's device thread
  // moves it); the returned work's wait() blocks in waitSend / waitRecv. Pairs and unbound
  // buffers take their own locks, so this thread may post while the progress thread runs a
  // collective on the same context; p2p slots are apart from the collectives'.
  WorkPtr post_send(const at::Tensor& t, int dst, int tag, const OpInfo& info) override {
    return post(t, info, [&](gloo::transport::UnboundBuffer& ub) { ub.send(dst, p2p_slot(tag)); },
                [](gloo::transport::UnboundBuffer& ub, std::chrono::milliseconds ms) { ub.waitSend(ms); });
  }
  WorkPtr post_recv(const at::Tensor& t, int src, int tag, const OpInfo& info) override {
    return post(t, info, [&](gloo::transport::UnboundBuffer& ub) { ub.recv(src, p2p_slot(tag)); },
                [](gloo::transport::UnboundBuffer& ub, std::chrono::milliseconds ms) { ub.waitRecv(ms); });
  }

  void barrier_raw() override {
    guarded([&] {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  static uint64_t p2p_slot(int tag) { return gloo::Slot::build(kP2PSlot, static_cast<uint32_t>(tag)); }

  template <typename Start, typename Finish>
  WorkPtr post(const at::Tensor& t, const OpInfo& info, Start&& start, Finish finish) {
    std::shared_ptr<gloo::transport::UnboundBuffer> ub = ctx_->createUnboundBuffer(t.data_ptr(), t.nbytes());
    guarded_as([&] { return info; }, [&] { start(*ub); });
    const std::chrono::milliseconds ms = timeout_;
    return std::make_shared<PostedWork>(t, info, options().train_timeout_seconds, [ub, info, finish, ms] {
      guarded_as([&] { return info; }, [&] { finish(*ub, ms); });
    });
  }

  // Every member issues ops in the same order, so a per-communicator counter gives
  // matching tags without any exchange. Slot tags have 24 bits.
  uint32_t next_tag() { return (tag_++) & 0xffffff; }

  // gloo reports timeouts and dead peers as exceptions; they end the job naming the op
  // (watchdog.h): the running one, or a posted send / receive's own. who() is only called
  // on failure.
  template <typename Who, typename F>
  static void guarded_as(const Who& who, F&& f) {
    try {
      f();
    } catch (const gloo::Exception& e) {
      abort_job(describe(who()) + " failed: " + e.what());
    }
  }
  template <typename F>
  void guarded(F&& f) {
    guarded_as([this] { return current_op(); }, std::forward<F>(f));
  }

  std::shared_ptr<gloo::Context> ctx_;
  std::chrono::milliseconds timeout_;
  uint32_t tag_ = 0;
};

// A single-member group never touches the network (Communicator handles size 1).
class LocalCommunicator : public TransportCommunicator {
 public:
  using TransportCommunicator::TransportCommunicator;
  std::string backend() const override { return "gloo"; }

 protected:
  void exchange(const void*, const std::vector<int64_t>&, const std::vector<int64_t>&, void*,
                const std::vector<int64_t>&, const std::vector<int64_t>&, size_t) override {}
  void gather_in_place(void*, const std::vector<int64_t>&, const std::vector<int64_t>&,
                       size_t) override {}
  void bcast(void*, int64_t, size_t, int) override {}
  void send_raw(const void*, int64_t, size_t, int, int) override {}
  void recv_raw(void*, int64_t, size_t, int, int) override {}
  void barrier_raw() override {}
};

// Worlds created one after another in the same job must not reuse store keys.
std::atomic<int> g_world_generation{0};

class GlooBackend : public Backend {
 public:
  explicit GlooBackend(const CommOptions& options)
      : options_(options), env_(detect_launch_env()), generation_(g_world_generation++) {
    const int nice = gloo_device_nice();  // checked on every rank, a lone one too
    if (env_.size == 1) return;  // no peers: no device, no store
    plan_ = plan_gloo_rendezvous(options_, env_);
    if (plan_.owns_dir) {
      remove_on_abort(plan_.dir);
      watch_stop_signals_for_cleanup();
    }
    {
      RendezvousScope waiting(env_.rank);  // a stop signal from here on removes the folder (abort_cleanup.h)
      store_ = open_gloo_store(plan_, options_, env_);
    }
    gloo::transport::tcp::attr attr;
    if (const char* ifname = std::getenv("TITAN_GLOO_IFNAME"); ifname && *ifname) {
      attr.iface = ifname;
    } else if (const char* host = std::getenv("TITAN_GLOO_HOST"); host && *host) {
      attr.hostname = host;
    } else {
      attr.hostname = "127.0.0.1";
    }
    try {
      device_ = create_device(attr, nice);
    } catch (const std::exception& e) {
      TITAN_CONFIG_FAIL("gloo: cannot open a TCP device on ",
                        attr.iface.empty() ? "host " + attr.hostname : "interface " + attr.iface,
                        ": ", e.what(), " (set TITAN_GLOO_IFNAME or TITAN_GLOO_HOST)");
    }
  }

  // Not shut down (an error unwinds past the World): the job is failing, and a plain mpirun
  // removes nothing, so whichever rank gets here removes the folder the job made.
  ~GlooBackend() override {
    if (!plan_.owns_dir) return;
    if (!shut_down_) {
      std::error_code ec;
      std::filesystem::remove_all(plan_.dir, ec);
    }
    keep_on_abort(plan_.dir);
  }

  std::string name() const override { return "gloo"; }
  int rank() const override { return env_.rank; }
  int size() const override { return env_.size; }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& name) override {
    int me = -1;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == env_.rank) me = static_cast<int>(i);
    if (ranks.size() == 1)
      return std::make_shared<LocalCommunicator>(name, ranks, env_.rank, options_);
    std::ostringstream prefix;
    prefix << "w" << generation_ << "/" << name << "/";
    for (int r : ranks) prefix << r << ",";
    // The same group may be built twice (two meshes): members count alike.
    prefix << "/" << created_[prefix.str()]++;
    OpInfo info;
    info.op = "new_group (gloo rendezvous, " + plan_.where + ")";
    info.group = name;
    info.group_rank = me;
    info.group_size = static_cast<int>(ranks.size());
    info.global_rank = env_.rank;
    WatchScope watch(info, options_.init_timeout_seconds);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(me, static_cast<int>(ranks.size()));
    ctx->setTimeout(to_ms(options_.init_timeout_seconds));
    try {
      RendezvousScope waiting(env_.rank);
      gloo::rendezvous::PrefixStore store(prefix.str(), *store_);
      ctx->connectFullMesh(store, device_);
    } catch (const std::exception& e) {
      abort_job(describe(info) + " failed: " + e.what());
    }
    ctx->setTimeout(to_ms(options_.train_timeout_seconds));
    return std::make_shared<GlooCommunicator>(ctx, name, ranks, env_.rank, options_);
  }

  void shutdown(Communicator& world) override {
    if (env_.size == 1) return;
    world.barrier()->wait();  // nobody reads the store any more
    shut_down_ = true;
    if (plan_.owns_dir && env_.rank == 0) {
      std::error_code ec;
      std::filesystem::remove_all(plan_.dir, ec);
    }
  }

 private:
  CommOptions options_;
  LaunchEnv env_;
  int generation_;
  GlooRendezvousPlan plan_;
  bool shut_down_ = false;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::map<std::string, int> created_;
};

}  // namespace

void register_gloo_backend() {
  register_backend("gloo", [](const CommOptions& o) { return std::make_unique<GlooBackend>(o); });
}

}  // namespace titan
