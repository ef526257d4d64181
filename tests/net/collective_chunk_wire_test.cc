// The all-reduce chunk between nodes (net::CollectiveChunk): out-of-range
// ranks, steps, sizes and chunk shapes from a peer are refused by name
// before anything reaches the ring.
#include <catch2/catch.hpp>

#include "net/wire.h"

using namespace sf;
using namespace sf::net;

namespace {

CollectiveChunk Good() {
  CollectiveChunk c;
  c.group_key = "grads";
  c.group_size = 3;
  c.generation = 4;
  c.from_rank = 2;
  c.step = 3;
  c.total = 5;
  c.address = "127.0.0.1:7000";
  c.chunk = Tensor(DType::kFloat64, {2});
  c.chunk.data<double>()[0] = 1.5;
  c.chunk.data<double>()[1] = -2;
  return c;
}

// The decoder's error for c, "" when it decodes.
std::string DecodeError(const CollectiveChunk& c) {
  auto frame = EncodeToString(Message{0, c});
  REQUIRE(frame.ok());
  auto back = DecodeFrameString(*frame);
  return back.ok() ? "" : back.status().message();
}

}  // namespace

TEST_CASE("CollectiveChunk round-trips, errors included, and so does CollectiveAnnounce", "[wire]") {
  REQUIRE(DecodeError(Good()) == "");
  auto frame = EncodeToString(Message{0, Good()});
  REQUIRE(frame.ok());
  auto back = DecodeFrameString(*frame);
  REQUIRE(back.ok());
  const auto& c = std::get<CollectiveChunk>(back->body);
  REQUIRE(c.group_key == "grads");
  REQUIRE(c.generation == 4);
  REQUIRE(c.chunk.data<double>()[1] == -2);
  CollectiveChunk piece = Good();
  piece.offset = 3;  // the last two of five elements
  auto piece_frame = EncodeToString(Message{0, piece});
  REQUIRE(piece_frame.ok());
  auto piece_back = DecodeFrameString(*piece_frame);
  REQUIRE(piece_back.ok());
  REQUIRE(std::get<CollectiveChunk>(piece_back->body).offset == 3);
  // An announcement is a message of its own; a chunk's step -1 is no longer one.
  CollectiveChunk old_announce = Good();
  old_announce.step = -1;
  old_announce.chunk = Tensor();
  REQUIRE(DecodeError(old_announce).find("step -1 is not in [0, 4)") != std::string::npos);
  const CollectiveAnnounce a{"grads", 3, 2, "127.0.0.1:7002", 1};
  auto a_frame = EncodeToString(Message{0, a});
  REQUIRE(a_frame.ok());
  auto a_back = DecodeFrameString(*a_frame);
  REQUIRE(a_back.ok());
  const auto& got = std::get<CollectiveAnnounce>(a_back->body);
  CHECK((got.group_key == "grads" && got.group_size == 3 && got.from_rank == 2 && got.address == "127.0.0.1:7002" &&
         got.epoch == 1));
  for (const auto& [bad, what] : std::vector<std::pair<CollectiveAnnounce, std::string>>{
           {{"g", 0, 0, "a:1", 0}, "group_size 0 is not in [1, 4096]"},
           {{"g", 2, 2, "a:1", 0}, "from_rank 2 is not in [0, 2)"},
           {{"g", 2, 1, "a:1", -1}, "epoch -1 is negative"}}) {
    auto f = EncodeToString(Message{0, bad});
    REQUIRE(f.ok());
    auto b = DecodeFrameString(*f);
    INFO(what << ": " << b.status().ToString());
    REQUIRE(!b.ok());
    CHECK(b.status().message().find("CollectiveAnnounce of group 'g': " + what) != std::string::npos);
  }
  CollectiveChunk failed = Good();
  failed.status = Unavailable("node b is down");
  failed.chunk = Tensor();
  REQUIRE(DecodeError(failed) == "");
}

TEST_CASE("CollectiveChunk fields out of range are refused by name", "[wire]") {
  struct Case {
    const char* what;
    void (*bad)(CollectiveChunk&);
  };
  const Case cases[] = {
      {"group_size 0", [](CollectiveChunk& c) { c.group_size = 0; }},
      {"group_size 4097", [](CollectiveChunk& c) { c.group_size = 4097; }},
      {"from_rank 3", [](CollectiveChunk& c) { c.from_rank = 3; }},
      {"from_rank -1", [](CollectiveChunk& c) { c.from_rank = -1; }},
      {"step 4", [](CollectiveChunk& c) { c.step = 4; }},
      {"step -2", [](CollectiveChunk& c) { c.step = -2; }},
      {"generation -1", [](CollectiveChunk& c) { c.generation = -1; }},
      {"total -1", [](CollectiveChunk& c) { c.total = -1; }},
      {"epoch -1", [](CollectiveChunk& c) { c.epoch = -1; }},
      {"offset -1", [](CollectiveChunk& c) { c.offset = -1; }},
      {"offset 6", [](CollectiveChunk& c) { c.offset = 6; }},
      {"holds more than total", [](CollectiveChunk& c) { c.total = 1; }},
      {"from offset 4", [](CollectiveChunk& c) { c.offset = 4; }},
      {"is not 1-D", [](CollectiveChunk& c) { c.chunk = Tensor(DType::kFloat64, {1, 2}); }},
  };
  for (const Case& k : cases) {
    CollectiveChunk c = Good();
    k.bad(c);
    const std::string e = DecodeError(c);
    INFO(k.what << ": " << e);
    REQUIRE(e.find("CollectiveChunk of group 'grads'") != std::string::npos);
    REQUIRE(e.find(k.what) != std::string::npos);
  }
}
