#include "parallel/pipeline/failure_channel.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/factory.h"
#include "parallel/comm/mpi_env.h"

namespace trident::parallel::pipeline {

using comm::Communicator;
using comm::Work;

namespace {
constexpr uint8_t kFailure = 1;
constexpr uint8_t kClosing = 2;
}  // namespace

FailureChannel::FailureChannel(const std::shared_ptr<Communicator>& group,
                               std::vector<std::shared_ptr<Communicator>> keep_alive)
    : keep_alive_(std::move(keep_alive)) {
  comm_ = group->split(0, group->rank(), group->name() + "-failures");
  keep_alive_.push_back(comm_);
  const int n = comm_->size();
  inbox_.resize(static_cast<size_t>(n));
  posted_.resize(static_cast<size_t>(n));
  closed_.assign(static_cast<size_t>(n), false);
  for (int r = 0; r < n; ++r) {
    if (r == comm_->rank()) continue;
    inbox_[static_cast<size_t>(r)] = zeros({kMessageBytes}, DType::U8);
    posted_[static_cast<size_t>(r)] = comm_->recv(inbox_[static_cast<size_t>(r)], r);
  }
}

std::vector<Tensor> FailureChannel::outgoing(uint8_t status, const std::string& text) const {
  Tensor t = zeros({kMessageBytes}, DType::U8);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  p[0] = status;
  std::memcpy(p + 1, text.data(), std::min<size_t>(text.size(), kMessageBytes - 2));
  return {t};
}

void FailureChannel::break_down(const std::string& why) {
  failed_ = true;
  // NOTE [Pipeline failures]: never freed; the job ends at exit.
  new std::vector<std::shared_ptr<Communicator>>(keep_alive_);
  comm::note_comm_timeout("a pipeline stage failed: " + why);
}

void FailureChannel::check() {
  if (failed_) return;
  for (int r = 0; r < comm_->size(); ++r) {
    const auto i = static_cast<size_t>(r);
    if (r == comm_->rank() || closed_[i] || !posted_[i].test()) continue;
    const auto* p = static_cast<const uint8_t*>(inbox_[i].data_ptr());
    if (p[0] == kClosing) {
      closed_[i] = true;
      continue;
    }
    const std::string text(reinterpret_cast<const char*>(p + 1));
    const std::string msg = text + " (reported by rank " + std::to_string(r) + " to rank " +
                            std::to_string(comm_->rank()) + " of '" + comm_->name() + "')";
    break_down(msg);
    TRIDENT_CHECK(false, msg);
  }
}

void FailureChannel::wait(Work& work) {
  // Spin a little (the usual case: the data is nearly there), then sleep between tests so a
  // waiting rank leaves the CPU to the stage it waits for when ranks share cores.
  for (int spins = 0; !work.test(); ++spins) {
    check();
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void FailureChannel::fail(const std::string& message) {
  if (!failed_) {
    std::vector<comm::P2POp> sends;
    for (int r = 0; r < comm_->size(); ++r)
      if (r != comm_->rank()) sends.push_back(comm::send_op(outgoing(kFailure, message)[0], r));
    break_down(message);
    if (!sends.empty()) {
      // Every other rank has a receive posted, so these complete (or time out).
      try {
        comm_->batch_send_recv(sends).wait();
      } catch (const Error&) {
      }
    }
  }
  TRIDENT_CHECK(false, message);
  std::abort();  // unreachable: TRIDENT_CHECK(false) throws
}

FailureChannel::~FailureChannel() {
  if (failed_ || comm_->aborted() || comm_->size() < 2) return;
  try {
    std::vector<comm::P2POp> sends;
    for (int r = 0; r < comm_->size(); ++r)
      if (r != comm_->rank()) sends.push_back(comm::send_op(outgoing(kClosing, "")[0], r));
    Work w = comm_->batch_send_recv(sends);
    w.wait();
    for (int r = 0; r < comm_->size(); ++r)
      if (r != comm_->rank()) posted_[static_cast<size_t>(r)].wait();
  } catch (const Error&) {
    // A destructor cannot throw; the communicator is aborted and the job ends at exit.
  }
}

}  // namespace trident::parallel::pipeline
