// How a failure in one pipeline stage reaches every other stage.
//
// NOTE [Pipeline failures]: the stages of a pipeline wait on each other's point-to-point
// transfers, so an exception in one stage (a bad target id in the last stage's loss, running out
// of memory) would leave the others waiting until the communication timeout, with an error that
// does not say what went wrong. A FailureChannel is a communicator of its own (split from the pp
// group) on which every rank keeps one receive posted from every other rank. Every wait of the
// pipeline goes through FailureChannel::wait, which also tests those receives; a stage that
// fails sends its message to every other rank (fail()) and throws it, and a rank whose wait sees
// such a message throws an Error carrying it. So every rank ends with the failing stage's
// message, at once.
// Afterwards the pipeline's communicators still have transfers that will never complete (a
// stage was waiting for an activation that will never come), which MPI cannot cancel; so, as
// after a timeout (NOTE [Ending after a timeout], comm/mpi_env.h), the communicators are kept
// alive (never freed, since MPI may still touch their buffers) and the process ends the job when
// it exits. A FailureChannel destroyed without a failure tells the others it is closing and
// collects their closing messages (every rank destroys its pipeline, collectively).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace trident::parallel::pipeline {

class FailureChannel {
 public:
  // Collective over `group`. `keep_alive`: communicators to keep forever after a failure.
  FailureChannel(const std::shared_ptr<comm::Communicator>& group,
                 std::vector<std::shared_ptr<comm::Communicator>> keep_alive);
  ~FailureChannel();
  FailureChannel(const FailureChannel&) = delete;
  FailureChannel& operator=(const FailureChannel&) = delete;

  // Waits for `work`, throwing an Error with another rank's message as soon as one reports a
  // failure (or CommTimeout at the work's deadline).
  void wait(comm::Work& work);
  // Throws if another rank has reported a failure; never blocks.
  void check();
  // Reports `message` to every other rank, then throws it as an Error on this one.
  [[noreturn]] void fail(const std::string& message);
  bool failed() const { return failed_; }

 private:
  static constexpr int64_t kMessageBytes = 2048;
  void break_down(const std::string& why);
  std::vector<Tensor> outgoing(uint8_t status, const std::string& text) const;

  std::shared_ptr<comm::Communicator> comm_;
  std::vector<std::shared_ptr<comm::Communicator>> keep_alive_;
  std::vector<Tensor> inbox_;       // one buffer per rank (this rank's unused)
  std::vector<comm::Work> posted_;  // the receive into inbox_[r]
  std::vector<bool> closed_;        // rank r's closing message has arrived
  bool failed_ = false;
};

}  // namespace trident::parallel::pipeline
