// elastic_cluster: the script-driven demo run small, as a user would, with
// a join, a drain and a kill; every event must show up as the session's
// reconfiguration and the model must keep learning. Also its script parser.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "examples/elastic_cluster/script.h"
#include "tests/support/run_command.h"

using sf::examples::ParseScript;
using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

namespace {

std::string Program() { return std::string(SF_BIN_DIR) + "/elastic_cluster"; }

// Lines of out that contain `what`.
// The lines of out holding what.
std::vector<std::string> LinesWith(const std::string& out, const std::string& what) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    if (line.find(what) != std::string::npos) lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

int CountLines(const std::string& out, const std::string& what) {
  int n = 0;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    if (out.substr(start, end - start).find(what) != std::string::npos) ++n;
    start = end + 1;
  }
  return n;
}

}  // namespace

TEST_CASE("elastic_cluster script parser", "[examples][elastic_cluster]") {
  auto s = ParseScript(" train 20 ;add; ; drain 1;kill 0 ");
  REQUIRE(s.ok());
  REQUIRE(s->size() == 4);
  CHECK((*s)[0].op == "train");
  CHECK((*s)[0].arg == 20);
  CHECK((*s)[1].op == "add");
  CHECK((*s)[2].op == "drain");
  CHECK((*s)[2].arg == 1);
  CHECK((*s)[3].op == "kill");
  CHECK((*s)[3].arg == 0);
  for (const char* bad : {"train", "train 0", "train x", "train 5 6", "add 2", "stop 1", "kill -1", ""}) {
    INFO(bad);
    auto r = ParseScript(bad);
    CHECK(!r.ok());
  }
  CHECK(ParseScript("train 5; jump").status().message().find("'jump'") != std::string::npos);
}

TEST_CASE("elastic_cluster refuses bad flags naming them", "[examples][elastic_cluster]") {
  auto r = RunCommand(Program() + " --script 'train 5; fly' 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("script command 'fly'") != std::string::npos);
  // Node 1 does not exist before an add.
  r = RunCommand(Program() + " --script 'train 5; kill 1; add' 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("'kill 1': node 1 does not exist yet") != std::string::npos);
  r = RunCommand(Program() + " --shards 0 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--shards") != std::string::npos);
}

TEST_CASE("elastic_cluster follows a join, a drain and a kill and keeps learning", "[examples][elastic_cluster]") {
  // Nodes 0, 1, 2; node 1 drains, node 0 (the one the session first
  // contacted) dies: node 2 ends with every task.
  auto r = RunCommand(Program() +
                      " --rows 20000 --batch 256 --checkpoint-every 10 --json --script "
                      "'train 20; add; train 10; add; train 10; drain 1; train 10; kill 0; train 30' 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string sum = LastLine(r.out);
  CHECK(JsonNumber(sum, "steps") == 80);
  CHECK(JsonNumber(sum, "events") == 4);
  CHECK(JsonNumber(sum, "added") == 2);
  CHECK(JsonNumber(sum, "drained") == 1);
  CHECK(JsonNumber(sum, "lost") == 1);
  CHECK(JsonNumber(sum, "recoveries") == 1);
  CHECK(JsonNumber(sum, "members") == 1);
  CHECK(JsonNumber(sum, "recovery_seconds_max") > 0);
  CHECK(JsonNumber(sum, "recovery_seconds_max") < 10);
  // The loss went down over the run, through every reconfiguration.
  CHECK(JsonNumber(sum, "final_loss") > 0);
  CHECK(JsonNumber(sum, "final_loss") < JsonNumber(sum, "first_loss") - 0.01);
  // One line per event and per change; the drained node left by itself; the
  // recovery restored tasks from the checkpoint of step 50 (the newest
  // before the kill); the joins and the drain moved tasks (the cluster's
  // placement leader moved their state, so this session moved none itself).
  CHECK(CountLines(r.out, "\"event\": \"add\"") == 2);
  CHECK(CountLines(r.out, "\"event\": \"drain\"") == 1);
  CHECK(CountLines(r.out, "\"event\": \"left\"") == 1);
  CHECK(CountLines(r.out, "\"event\": \"kill\"") == 1);
  CHECK(CountLines(r.out, "\"event\": \"change\"") == 4);
  CHECK(CountLines(r.out, "\"event\": \"loss\"") == 8);
  CHECK(CountLines(r.out, "\"checkpoint_step\": 50") == 1);
  CHECK(CountLines(r.out, "\"restored_tasks\": []") == 3);
  CHECK(CountLines(r.out, "\"moved_tasks\": []") == 1);
  CHECK(JsonNumber(sum, "failed_steps") == 0);
}

TEST_CASE("elastic_cluster --workers 4: four sessions train one model through joins, a drain and a kill",
          "[examples][elastic_cluster]") {
  auto r = RunCommand(Program() +
                      " --workers 4 --rows 20000 --batch 128 --checkpoint-every 10 --json --script "
                      "'train 20; add; train 10; add; train 10; drain 1; train 10; kill 0; train 20' 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string sum = LastLine(r.out);
  CHECK(JsonNumber(sum, "workers") == 4);
  CHECK(JsonNumber(sum, "steps") == 4 * 70);
  CHECK(JsonNumber(sum, "members") == 1);
  CHECK(sum.find("\"every_worker_loss_fell\": true") != std::string::npos);
  // No worker step failed on a join or a drain: the failures, if any, came
  // after the kill (worker 0 restores what it lost; the others may meet the
  // restored slots first).
  for (const std::string& line : LinesWith(r.out, "\"event\": \"step_failed\""))
    CHECK(JsonNumber(line, "seconds_since_kill") >= 0);
  CHECK(JsonNumber(sum, "changes") >= 4 * 3);
}
