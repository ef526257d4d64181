// EtcdProcess: fork/exec of etcd with its flags, a health wait through
// EtcdClient, and signals by PID.
#include "cluster/etcd_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "net/credentials.h"

namespace sf {
namespace cluster {

namespace {

using Clock = std::chrono::steady_clock;

// Two distinct free loopback ports, held open together so they differ.
Status PickPorts(int* a, int* b) {
  int fds[2] = {-1, -1};
  int ports[2] = {0, 0};
  Status s;
  for (int i = 0; i < 2 && s.ok(); ++i) {
    fds[i] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fds[i] < 0 || ::bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fds[i], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      s = Unavailable(std::string("etcd: cannot find a free port: ") + std::strerror(errno));
    } else {
      ports[i] = ntohs(addr.sin_port);
    }
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  *a = ports[0];
  *b = ports[1];
  return s;
}

bool Exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

// Waits up to d for pid to exit and reaps it; returns whether it did.
bool WaitExit(pid_t pid, std::chrono::milliseconds d) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  const auto end = Clock::now() + d;
  for (;;) {
    if (Exited(pid)) {
      if (pidfd >= 0) ::close(pidfd);
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    if (pidfd >= 0) {
      // Readable when the child exits: no polling interval to pick.
      pollfd p{pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long>(left, 10)));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  return false;
}

}  // namespace

// A thread that runs fork() for the object: PR_SET_PDEATHSIG fires when the
// thread that forked ends, so forking from a caller's short-lived thread
// would kill etcd with it.
struct EtcdProcess::Spawner {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;  // GUARDED_BY(mu)
  bool done = false;          // GUARDED_BY(mu)
  bool stop = false;          // GUARDED_BY(mu)
  std::thread thread;

  Spawner() {
    thread = std::thread([this] {
      std::unique_lock<std::mutex> l(mu);
      for (;;) {
        cv.wait(l, [&] { return stop || job; });
        if (stop) return;
        job();
        job = nullptr;
        done = true;
        cv.notify_all();
      }
    });
  }
  ~Spawner() {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
      cv.notify_all();
    }
    thread.join();
  }
  void Run(std::function<void()> f) {
    std::unique_lock<std::mutex> l(mu);
    job = std::move(f);
    done = false;
    cv.notify_all();
    cv.wait(l, [&] { return done; });
  }
};

EtcdProcess::EtcdProcess(EtcdProcessOptions options)
    : options_(std::move(options)), spawner_(std::make_unique<Spawner>()) {}

EtcdProcess::~EtcdProcess() {
  std::lock_guard<std::mutex> l(mu_);
  StopLocked();  // obeyed SIGTERM or killed after stop_timeout: gone either way
  spawner_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Status EtcdProcess::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (pid_ > 0) return FailedPrecondition("etcd: already running at 127.0.0.1:" + std::to_string(client_port_));
  const std::string& creds = options_.credentials_dir;
  if (creds.empty() && !options_.plaintext)
    return InvalidArgument("etcd: EtcdProcessOptions::credentials_dir is required");
  if (!options_.plaintext && !std::filesystem::exists(creds + "/" + options_.server_credential + ".crt")) {
    // 127.0.0.1 too: etcdctl and other Go clients check the address they dial.
    SF_RETURN_IF_ERROR(net::IssueEtcdCredential(creds, options_.server_credential, {"127.0.0.1"}));
  }
  if (dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string parent = !options_.temp_parent.empty() ? options_.temp_parent : (tmp && *tmp ? tmp : "/tmp");
    std::string pattern = parent + "/shardflow-etcd-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      return Unavailable("etcd: cannot create " + pattern + ": " + std::strerror(errno));
    dir_ = pattern;
  }
  // Ports picked here may be taken by another process before etcd binds
  // them; a first start that fails so is retried on new ports (and fresh
  // data, which names its peer port). A start after Stop keeps its ports.
  Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (client_port_ == 0 || attempt > 0) {
      std::error_code ec;
      std::filesystem::remove_all(dir_ + "/data", ec);
      SF_RETURN_IF_ERROR(PickPorts(&client_port_, &peer_port_));
    }
    s = Launch();
    if (s.ok()) s = WaitHealthy();
    if (s.ok()) return s;
    KillLocked();  // a failed start leaves nothing running
    if (s.message().find("address already in use") == std::string::npos) break;
  }
  return s;
}

Status EtcdProcess::Launch() {
  const std::string& c = options_.credentials_dir;
  const std::string crt = c + "/" + options_.server_credential + ".crt";
  const std::string key = c + "/" + options_.server_credential + ".key";
  const std::string ca = c + "/ca.crt";
  const std::string scheme = options_.plaintext ? "http://" : "https://";
  const std::string client_url = scheme + "127.0.0.1:" + std::to_string(client_port_);
  const std::string peer_url = scheme + "127.0.0.1:" + std::to_string(peer_port_);
  std::vector<std::string> args = {options_.etcd_binary,
                                   "--name", "default",
                                   "--data-dir", dir_ + "/data",
                                   "--listen-client-urls", client_url,
                                   "--advertise-client-urls", client_url,
                                   "--listen-peer-urls", peer_url,
                                   "--initial-advertise-peer-urls", peer_url,
                                   "--initial-cluster", "default=" + peer_url,
                                   "--election-timeout", std::to_string(options_.election_timeout_ms),
                                   "--heartbeat-interval", std::to_string(options_.heartbeat_interval_ms)};
  if (!options_.plaintext)
    args.insert(args.end(), {"--cert-file", crt, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
                             "--peer-cert-file", crt, "--peer-key-file", key, "--peer-trusted-ca-file", ca,
                             "--peer-client-cert-auth",
                             // shardflow's etcd passwords are 256-bit digests of keys
                             // (cluster/etcd_identity.h): bcrypt's cost guards weak
                             // passwords only, and each login pays it.
                             "--bcrypt-cost", "4"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log_path = dir_ + "/etcd.log";
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return Unavailable("etcd: cannot open " + log_path + ": " + std::strerror(errno));
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  pid_t pid = -1;
  int fork_errno = 0;
  spawner_->Run([&] {
    pid = ::fork();
    if (pid == 0) {
      // The child: only async-signal-safe calls until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(devnull, 0);
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::syscall(SYS_close_range, 3, ~0U, 0);  // the parent's sockets are not etcd's
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    fork_errno = errno;
  });
  ::close(log);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) return Unavailable(std::string("etcd: fork failed: ") + std::strerror(fork_errno));
  pid_ = pid;
  return Status::OK();
}

Status EtcdProcess::WaitHealthy() {
  const auto deadline = Clock::now() + options_.start_timeout;
  const std::string where = "etcd at 127.0.0.1:" + std::to_string(client_port_);
  EtcdClientOptions o;
  o.endpoints = "127.0.0.1:" + std::to_string(client_port_);
  if (options_.plaintext) {
    o.plaintext_for_tests = true;
  } else {
    auto cred = net::LoadCredential(options_.credentials_dir, options_.client_credential);
    if (!cred.ok()) return cred.status().WithPrefix(where + ": the credential to check its health with");
    o.credential = *cred;
  }
  o.request_timeout = std::chrono::milliseconds(1000);
  auto client = EtcdClient::Create(o);
  if (!client.ok()) return client.status();
  Status last;
  for (;;) {
    if (Exited(pid_)) {
      pid_ = -1;
      return Unavailable(where + " exited while starting (" + options_.etcd_binary + "); its log ends:\n" +
                         LogTailLocked(20));
    }
    last = (*client)->Health();
    if (last.ok()) return last;
    if (Clock::now() >= deadline) break;
    // Until it listens a try is refused at once: pace the tries.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Unavailable(where + " not healthy within " + std::to_string(options_.start_timeout.count()) +
                     " ms (" + last.ToString() + "); its log ends:\n" + LogTailLocked(20));
}

void EtcdProcess::KillLocked() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

bool EtcdProcess::StopLocked() {
  if (pid_ <= 0) return true;
  ::kill(pid_, SIGTERM);
  ::kill(pid_, SIGCONT);  // a paused etcd must run to act on SIGTERM
  if (WaitExit(pid_, options_.stop_timeout)) {
    pid_ = -1;
    return true;
  }
  KillLocked();
  return false;
}

Status EtcdProcess::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  const pid_t pid = pid_;
  if (StopLocked()) return Status::OK();
  return DeadlineExceeded("etcd (pid " + std::to_string(pid) + ") ignored SIGTERM for " +
                          std::to_string(options_.stop_timeout.count()) + " ms; killed");
}

Status EtcdProcess::Kill() {
  std::lock_guard<std::mutex> l(mu_);
  KillLocked();
  return Status::OK();
}

Status EtcdProcess::Pause() {
  std::lock_guard<std::mutex> l(mu_);
  if (pid_ <= 0) return FailedPrecondition("etcd: not running");
  ::kill(pid_, SIGSTOP);
  return Status::OK();
}

Status EtcdProcess::Resume() {
  std::lock_guard<std::mutex> l(mu_);
  if (pid_ <= 0) return FailedPrecondition("etcd: not running");
  ::kill(pid_, SIGCONT);
  return Status::OK();
}

Status EtcdProcess::Restart() {
  std::lock_guard<std::mutex> l(mu_);
  if (dir_.empty()) return FailedPrecondition("etcd: Restart before Start");
  StopLocked();  // killed after stop_timeout if it ignored SIGTERM: stopped either way
  SF_RETURN_IF_ERROR(Launch());
  Status s = WaitHealthy();
  if (!s.ok()) KillLocked();  // leave nothing half-started
  return s;
}

std::string EtcdProcess::endpoint() const {
  std::lock_guard<std::mutex> l(mu_);
  return client_port_ > 0 ? "127.0.0.1:" + std::to_string(client_port_) : "";
}

bool EtcdProcess::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return pid_ > 0;
}

std::string EtcdProcess::dir() const {
  std::lock_guard<std::mutex> l(mu_);
  return dir_;
}

pid_t EtcdProcess::pid() const {
  std::lock_guard<std::mutex> l(mu_);
  return pid_;
}

std::string EtcdProcess::LogTail(size_t lines) const {
  std::lock_guard<std::mutex> l(mu_);
  return LogTailLocked(lines);
}

std::string EtcdProcess::LogTailLocked(size_t lines) const {
  std::ifstream f(dir_ + "/etcd.log");
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(f, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& t : tail) out += t + "\n";
  return out;
}

}  // namespace cluster
}  // namespace sf
