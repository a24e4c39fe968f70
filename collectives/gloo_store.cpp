#include "collectives/gloo_store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <gloo/rendezvous/file_store.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "common/error.h"

namespace titan {

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string numeric(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  else if (a->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
  return buf;
}

std::set<std::string> resolve(const std::string& host, const std::string& source) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  TITAN_CONFIG_CHECK(rc == 0, "gloo TCP store: cannot resolve host '", host, "' (from ",
                     source, "): ", gai_strerror(rc));
  std::set<std::string> out;
  for (addrinfo* p = res; p; p = p->ai_next) out.insert(numeric(p->ai_addr));
  freeaddrinfo(res);
  return out;
}

// Rank 0 serves on every interface; the others dial master_host, so it must be this host.
void check_master_is_local(const LaunchEnv& env) {
  const std::set<std::string> wanted = resolve(env.master_host, env.master_source);
  std::set<std::string> mine;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* p = list; p; p = p->ifa_next)
      if (p->ifa_addr) mine.insert(numeric(p->ifa_addr));
    freeifaddrs(list);
  }
  for (const std::string& a : wanted)
    if (mine.count(a) || a.rfind("127.", 0) == 0 || a == "::1") return;
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  std::string addrs;
  for (const std::string& a : wanted) addrs += (addrs.empty() ? "" : ", ") + a;
  TITAN_CONFIG_FAIL("gloo TCP store: rank 0 serves the store, but master host '",
                    env.master_host, "' (from ", env.master_source, ") is ", addrs,
                    ", not an address of rank 0's host ", name,
                    ": set TITAN_MASTER_ADDR to the host that runs rank 0");
}

std::string what_of(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// gloo's Store interface over a c10d::TCPStore; errors name the store and the key.
class TcpStore final : public gloo::rendezvous::Store {
 public:
  TcpStore(std::shared_ptr<c10d::TCPStore> store, std::string where,
           std::chrono::milliseconds timeout)
      : store_(std::move(store)), where_(std::move(where)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    call("set", key, [&] { store_->set(key, std::vector<uint8_t>(data.begin(), data.end())); });
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> out;
    call("get", key, [&] {
      auto v = store_->get(key);
      out.assign(v.begin(), v.end());
    });
    return out;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    call("wait for", keys.empty() ? std::string() : keys.front(),
         [&] { store_->wait(keys, timeout); });
  }

 private:
  template <typename F>
  void call(const char* op, const std::string& key, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw std::runtime_error(where_ + ": " + op + " key '" + key + "': " + what_of(e));
    }
  }

  std::shared_ptr<c10d::TCPStore> store_;
  std::string where_;
  std::chrono::milliseconds timeout_;
};

// One connection (and on rank 0 one server) per host:port for the whole process: Worlds made
// one after another must not close the server a peer is still connecting to. Never freed;
// the server thread ends with the process, after the last World's final barrier.
std::shared_ptr<c10d::TCPStore> shared_tcp_store(const LaunchEnv& env,
                                                 const CommOptions& options) {
  static std::mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<c10d::TCPStore>>;
  const std::string key = env.master_host + ":" + std::to_string(env.master_port);
  std::lock_guard<std::mutex> lock(mu);
  auto& s = (*stores)[key];
  if (s) return s;
  const bool server = env.rank == 0;
  if (server) check_master_is_local(env);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  o.isServer = server;
  o.waitWorkers = false;
  o.multiTenant = true;
  o.timeout = to_ms(options.init_timeout_seconds);
  try {
    s = std::make_shared<c10d::TCPStore>(env.master_host, o);
  } catch (const std::exception& e) {
    s.reset();
    if (server)
      TITAN_CONFIG_FAIL("gloo TCP store: rank 0 cannot serve on port ", env.master_port,
                        " (from ", env.master_source, "): ", what_of(e),
                        " (choose a free port with TITAN_MASTER_PORT)");
    TITAN_FAIL("gloo TCP store: rank ", env.rank, " of ", env.size, " cannot reach ", key,
               " (from ", env.master_source, ") within ", options.init_timeout_seconds,
               " s: ", what_of(e), " (is rank 0 up, and is ", env.master_host,
               " the host of rank 0?)");
  }
  return s;
}

}  // namespace

GlooRendezvousPlan plan_gloo_rendezvous(const CommOptions& options, const LaunchEnv& env) {
  GlooRendezvousPlan p;
  if (!options.rendezvous_dir.empty()) {
    TITAN_CONFIG_CHECK(env.master_source.rfind("TITAN_MASTER_ADDR", 0) != 0,
                       "gloo: both comm.rendezvous_dir (", options.rendezvous_dir,
                       ") and TITAN_MASTER_ADDR (", env.master_host,
                       ") are set; choose a file store or a TCP store");
    p.dir = options.rendezvous_dir;
    p.where = "file store in " + p.dir;
    return p;
  }
  if (!env.master_host.empty()) {
    p.tcp = true;
    p.where = "TCP store at " + env.master_host + ":" + std::to_string(env.master_port) +
              " (from " + env.master_source + ")";
    return p;
  }
  TITAN_CONFIG_CHECK(!env.job_id.empty(), "gloo backend with ", env.size, " ranks (from ",
                     env.source,
                     "): set comm.rendezvous_dir, TITAN_MASTER_ADDR or TITAN_RUN_ID so the "
                     "ranks can meet");
  p.dir = "/tmp/titan-gloo-" + env.job_id;
  p.owns_dir = true;
  p.where = "file store in " + p.dir;
  return p;
}

std::shared_ptr<gloo::rendezvous::Store> open_gloo_store(const GlooRendezvousPlan& plan,
                                                         const CommOptions& options,
                                                         const LaunchEnv& env) {
  if (plan.tcp)
    return std::make_shared<TcpStore>(shared_tcp_store(env, options), plan.where,
                                      to_ms(options.init_timeout_seconds));
  std::error_code ec;
  std::filesystem::create_directories(plan.dir, ec);
  TITAN_CONFIG_CHECK(!ec, "gloo rendezvous folder ", plan.dir, ": ", ec.message());
  return std::make_shared<gloo::rendezvous::FileStore>(plan.dir);
}

}  // namespace titan
