#pragma once
// dist::mpi_comm: the ranks of an MPI job (Open MPI from Debian's packages:
// openmpi-bin, libopenmpi-dev). Include this header only in programs built
// with MPI (CMake: target_link_libraries(app PRIVATE MPI::MPI_CXX)); the rest
// of ctg needs no MPI.
//   int main(int argc, char** argv) {
//     ctg::dist::mpi_comm comm{argc, argv};   // MPI_Init, unless already done; MPI_Finalize at its end
//     ... comm.rank(), comm.size() ...
//   }
// Blocks travel as MPI_BYTE; a block over INT_MAX bytes is a ctg::error.
// Every MPI failure becomes a ctg::error naming the call and MPI's message
// (errors return, MPI_ERRORS_RETURN, instead of aborting the job).
#include <climits>
#include <string>

#include <mpi.h>

#include <ctg/dist/communicator.hpp>

namespace ctg::dist {

class mpi_comm final : public communicator {
 public:
  mpi_comm(int& argc, char**& argv) {
    int ready = 0;
    check(MPI_Initialized(&ready), "MPI_Initialized");
    if (!ready) {
      check(MPI_Init(&argc, &argv), "MPI_Init");
      owns_init_ = true;
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  mpi_comm(const mpi_comm&) = delete;
  mpi_comm& operator=(const mpi_comm&) = delete;
  ~mpi_comm() override {
    MPI_Comm_free(&comm_);
    int done = 0;
    MPI_Finalized(&done);
    if (owns_init_ && !done) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t block) override {
    check(MPI_Allgather(send, count(block), MPI_BYTE, recv, count(block), MPI_BYTE, comm_), "MPI_Allgather");
  }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t block) override {
    check(MPI_Alltoall(send, count(block), MPI_BYTE, recv, count(block), MPI_BYTE, comm_), "MPI_Alltoall");
  }

 private:
  static int count(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT_MAX))
      throw error("ctg: mpi_comm: a block of " + std::to_string(bytes) + " bytes is over MPI's int count");
    return static_cast<int>(bytes);
  }
  static void check(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw error(std::string("ctg: mpi_comm: ") + call + " failed: " + std::string(text, static_cast<std::size_t>(length)));
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
};

}  // namespace ctg::dist
