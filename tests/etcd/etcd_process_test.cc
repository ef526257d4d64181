// EtcdProcess against Debian's etcd 3.4, and the etcd credential it serves
// with (net::IssueEtcdCredential).
#include <catch2/catch.hpp>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "cluster/etcd_process.h"
#include "tests/etcd/etcd_fixture.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace sf {
namespace {

using cluster::EtcdProcess;
using cluster::EtcdProcessOptions;
using std::chrono::milliseconds;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Gone: no such process, or a zombie its new parent has not reaped yet.
bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

TEST_CASE("an etcd credential names etcd.shardflow.internal, serves both ways, and is no peer's") {
  testing::TempDir tmp("sf_etcd_cred");
  const std::string dir = tmp / "tls";
  REQUIRE(net::InitCredentials(dir).ok());
  REQUIRE(net::IssueEtcdCredential(dir, "etcd", {"127.0.0.1", "etcd.example"}).ok());
  CHECK(net::IssueEtcdCredential(dir, "etcd").code() == Code::kFailedPrecondition);  // never replaced
  CHECK(net::IssueEtcdCredential(dir, "bad/name").code() == Code::kInvalidArgument);

  const std::string pem = ReadAll(dir + "/etcd.crt");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(cert != nullptr);
  CHECK(X509_check_host(cert, net::kEtcdHostName, 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert, "etcd.example", 0, 0, nullptr) == 1);
  CHECK(X509_check_ip_asc(cert, "127.0.0.1", 0) == 1);
  CHECK(X509_check_host(cert, net::kNodeHostName, 0, 0, nullptr) != 1);
  // Go's TLS checks extended key usage on both ends: etcd serves with it and
  // its JSON gateway dials etcd's own gRPC server with it as a client.
  const uint32_t eku = X509_get_extended_key_usage(cert);
  CHECK((eku & XKU_SSL_SERVER) != 0);
  CHECK((eku & XKU_SSL_CLIENT) != 0);
  char cn[128] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  CHECK(std::string(cn) == "etcd:etcd");
  X509_free(cert);

  // Nodes must not take an etcd credential for a peer.
  net::Role role;
  std::string name;
  CHECK(net::ParseCommonName("etcd:etcd", &role, &name).code() == Code::kInvalidArgument);
  CHECK(net::LoadCredential(dir, "etcd").status().code() == Code::kInvalidArgument);
}

TEST_CASE("EtcdProcess starts etcd with mutual TLS, answers health, stops, and removes its directory") {
  std::string dir;
  {
    auto etcd = testing::StartEtcd();
    dir = etcd->dir();
    CHECK(etcd->running());
    CHECK(etcd->endpoint().rfind("127.0.0.1:", 0) == 0);
    CHECK(std::filesystem::exists(dir + "/etcd.log"));
    CHECK(etcd->Start().code() == Code::kFailedPrecondition);
    auto client = testing::Connect(*etcd);
    CHECK(client->Health().ok());
    REQUIRE(etcd->Stop().ok());
    CHECK_FALSE(etcd->running());
    const Status down = client->Health();
    INFO(down.ToString());
    CHECK(down.code() == Code::kUnavailable);
    CHECK(down.message().find(etcd->endpoint()) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("EtcdProcess Restart keeps data and ports, Pause hangs it, Resume and Kill end that") {
  auto etcd = testing::StartEtcd();
  const std::string endpoint = etcd->endpoint();
  auto o = testing::ClientOptions(endpoint);
  o.request_timeout = milliseconds(300);
  auto client = testing::MakeClient(o);
  REQUIRE(client->Put("/sf/kept", "1").ok());

  REQUIRE(etcd->Restart().ok());
  CHECK(etcd->endpoint() == endpoint);
  // The client's kept connection died with the old process: the call goes through on a new one.
  auto kept = client->Get("/sf/kept");
  INFO(kept.status().ToString());
  REQUIRE(kept.ok());
  REQUIRE(kept->has_value());
  CHECK((*kept)->value == "1");

  REQUIRE(etcd->Pause().ok());
  const auto t0 = std::chrono::steady_clock::now();
  const Status hung = client->Put("/sf/kept", "2").status();
  CHECK(hung.code() == Code::kDeadlineExceeded);
  CHECK(hung.message().find(endpoint) != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < milliseconds(3000));
  REQUIRE(etcd->Resume().ok());
  CHECK(testing::WaitFor([&] { return client->Put("/sf/kept", "3").ok(); }, milliseconds(10000)));

  REQUIRE(etcd->Kill().ok());
  CHECK_FALSE(etcd->running());
  CHECK(client->Get("/sf/kept").status().code() == Code::kUnavailable);
  CHECK(etcd->Pause().code() == Code::kFailedPrecondition);
}

TEST_CASE("EtcdProcess reports an etcd that cannot start, with its log") {
  EtcdProcessOptions o;
  o.credentials_dir = testing::EtcdTlsDir();
  o.etcd_binary = "/bin/false";
  EtcdProcess etcd(o);
  const Status s = etcd.Start();
  CHECK(s.code() == Code::kUnavailable);
  CHECK(s.message().find("exited while starting") != std::string::npos);
  CHECK_FALSE(etcd.running());

  EtcdProcessOptions none;
  CHECK(EtcdProcess(none).Start().code() == Code::kInvalidArgument);
}

TEST_CASE("etcd does not outlive the process that started it") {
  testing::TempDir tmp("sf_etcd_orphan");
  const std::string& tls_dir = testing::EtcdTlsDir();  // made here: the child exits without cleaning up
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A process that starts etcd and dies without cleaning up (as a crash would).
    ::close(fds[0]);
    EtcdProcessOptions o;
    o.credentials_dir = tls_dir;
    o.temp_parent = tmp.path;
    auto* etcd = new EtcdProcess(o);
    const pid_t pid = etcd->Start().ok() ? etcd->pid() : -1;
    if (::write(fds[1], &pid, sizeof pid) != sizeof pid) ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t etcd_pid = -1;
  REQUIRE(::read(fds[0], &etcd_pid, sizeof etcd_pid) == sizeof etcd_pid);
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(etcd_pid > 0);
  CHECK(testing::WaitFor([&] { return ProcessGone(etcd_pid); }, milliseconds(10000)));
  if (!ProcessGone(etcd_pid)) ::kill(etcd_pid, SIGKILL);  // never leave one behind, even when failing
}

}  // namespace
}  // namespace sf
