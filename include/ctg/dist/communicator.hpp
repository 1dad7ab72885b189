#pragma once
// A communicator: the ranks of one training run and the two collectives ctg
// needs of them. Every reduction (the sum of gradients, the max of FP8
// amaxes, the gradient norm) is computed by ctg from gathered pieces, in
// rank order, so its bits depend on neither the library nor the world size
// (Open MPI's own reduce-scatter was measured to change its order at 4
// ranks). A backend implements:
//   all_gather: every rank contributes one block of `block` bytes; every rank
//               receives all of them, rank r's at r * block;
//   all_to_all: every rank sends block j (of size() blocks) to rank j; rank
//               r's block to me arrives at r * block.
// Bytes travel as bytes (FP8 payloads too: no MPI or NCCL FP8 types).
//
// The typed forms below check what they move: count x sizeof(wire type) on
// every rank (a silent fall back to a wider type cannot happen), and give
// each call its kind for recording_comm.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <ctg/core/error.hpp>

namespace ctg::dist {

enum class collective : std::uint8_t { all_gather, all_to_all };

class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // recv holds size() * send.size() elements: rank r's send at r * send.size().
  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check_sizes("ctg: all_gather", recv.size(), send.size() * static_cast<std::size_t>(size()));
    all_gather_bytes(reinterpret_cast<const std::byte*>(send.data()), reinterpret_cast<std::byte*>(recv.data()),
                     send.size_bytes());
  }
  // send and recv hold size() blocks of `block` elements each.
  template <class T>
  void all_to_all(std::span<const T> send, std::span<T> recv, std::size_t block) {
    const std::size_t want = block * static_cast<std::size_t>(size());
    check_sizes("ctg: all_to_all", recv.size(), want);
    if (send.size() != want)
      throw error("ctg: all_to_all: " + std::to_string(send.size()) + " elements sent, " + std::to_string(want) +
                  " expected (" + std::to_string(size()) + " blocks of " + std::to_string(block) + ")");
    all_to_all_bytes(reinterpret_cast<const std::byte*>(send.data()), reinterpret_cast<std::byte*>(recv.data()),
                     block * sizeof(T));
  }

 protected:
  virtual void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t block) = 0;
  virtual void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t block) = 0;
  friend class recording_comm;

 private:
  static void check_sizes(const char* what, std::size_t recv, std::size_t want) {
    if (recv != want)
      throw error(std::string(what) + ": the receive buffer holds " + std::to_string(recv) + " elements, " +
                  std::to_string(want) + " expected");
  }
};

// One process, one rank: the collectives copy.
class self_comm final : public communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

 protected:
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t block) override { copy(send, recv, block); }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t block) override { copy(send, recv, block); }

 private:
  static void copy(const std::byte* from, std::byte* to, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
  }
};

// Wraps another communicator and counts, per kind, the calls made and the
// bytes this rank sent (a test's way to see what a step moved).
class recording_comm final : public communicator {
 public:
  struct tally {
    std::size_t calls = 0, bytes_sent = 0;
    std::size_t largest = 0;  // the most bytes one call sent
  };
  explicit recording_comm(communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const tally& of(collective c) const { return tallies_[static_cast<int>(c)]; }
  std::size_t bytes_sent() const { return tallies_[0].bytes_sent + tallies_[1].bytes_sent; }
  void reset() { tallies_[0] = tallies_[1] = {}; }

 protected:
  // all_gather sends its block to every other rank; all_to_all one block to each.
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t block) override {
    count(collective::all_gather, block * static_cast<std::size_t>(size() - 1));
    inner_.all_gather_bytes(send, recv, block);
  }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t block) override {
    count(collective::all_to_all, block * static_cast<std::size_t>(size() - 1));
    inner_.all_to_all_bytes(send, recv, block);
  }

 private:
  void count(collective c, std::size_t bytes) {
    tally& t = tallies_[static_cast<int>(c)];
    ++t.calls;
    t.bytes_sent += bytes;
    t.largest = bytes > t.largest ? bytes : t.largest;
  }
  communicator& inner_;
  tally tallies_[2]{};
};

}  // namespace ctg::dist
