#include "parallel/comm/local_communicator.h"

#include <cstring>

namespace trident::parallel::comm {
namespace {

struct DoneWork final : Work::Impl {
  bool poll() override { return true; }
};

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(const CommOptions& options) : Communicator(make_state(options), {0}) {}

 protected:
  std::shared_ptr<Work::Impl> do_all_reduce(const Tensor&, ReduceOp) override { return done(); }
  std::shared_ptr<Work::Impl> do_all_gather(const Tensor& output, const Tensor& input,
                                            const std::vector<int64_t>&) override {
    return copy(output, input);
  }
  std::shared_ptr<Work::Impl> do_reduce_scatter(const Tensor& output, const Tensor& input,
                                                const std::vector<int64_t>&, ReduceOp) override {
    return copy(output, input);
  }
  std::shared_ptr<Work::Impl> do_broadcast(const Tensor&, int) override { return done(); }
  std::shared_ptr<Work::Impl> do_barrier() override { return done(); }
  std::shared_ptr<Work::Impl> do_send_recv(const std::vector<P2POp>&) override {
    TRIDENT_ASSERT(false, "a group of one has no peer (checked before)");
    return done();
  }
  std::shared_ptr<Communicator> do_split(int, int, const std::vector<int>&, const std::vector<int>&,
                                         const std::string& name) override {
    return std::make_shared<LocalCommunicator>(CommOptions{name, state()->timeout});
  }

 private:
  static std::shared_ptr<CommState> make_state(const CommOptions& options) {
    auto s = std::make_shared<CommState>();
    s->name = options.name.empty() ? "local" : options.name;
    s->backend = Backend::Local;
    s->timeout = options.timeout ? *options.timeout : default_timeout();
    return s;
  }
  static std::shared_ptr<Work::Impl> done() { return std::make_shared<DoneWork>(); }
  static std::shared_ptr<Work::Impl> copy(const Tensor& output, const Tensor& input) {
    // Both contiguous, same dtype and element count (checked by Communicator).
    if (output.numel() > 0) std::memmove(output.data_ptr(), input.data_ptr(), output.nbytes());
    return done();
  }
};

}  // namespace

std::shared_ptr<Communicator> make_local_communicator(const CommOptions& options) {
  return std::make_shared<LocalCommunicator>(options);
}

}  // namespace trident::parallel::comm
