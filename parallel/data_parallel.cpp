#include "parallel/data_parallel.h"

#include <map>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"

namespace trident::parallel {

void broadcast_tensors(comm::Communicator& group, const std::vector<Tensor>& tensors, int64_t bucket_bytes) {
  if (group.size() == 1 || tensors.empty()) return;
  NoGradGuard no_grad;
  // Flat buffers of one dtype up to bucket_bytes each, in the tensors' order.
  struct Flat {
    std::vector<Tensor> members;
    int64_t numel = 0;
  };
  std::vector<Flat> flats;
  std::map<DType, size_t> open;  // dtype -> its flat being filled
  for (const Tensor& t : tensors) {
    auto it = open.find(t.dtype());
    if (it == open.end() ||
        (flats[it->second].numel + t.numel()) * static_cast<int64_t>(t.element_size()) > bucket_bytes) {
      flats.push_back({});
      it = open.insert_or_assign(t.dtype(), flats.size() - 1).first;
    }
    flats[it->second].members.push_back(t);
    flats[it->second].numel += t.numel();
  }
  std::vector<Tensor> buffers;
  std::vector<comm::Work> works;
  for (const Flat& f : flats) {
    Tensor buf = empty({f.numel}, TensorOptions(f.members.front().dtype()).device(f.members.front().device()));
    if (group.rank() == 0) {
      int64_t off = 0;
      for (const Tensor& t : f.members) {
        copy_(buf.as_strided(t.sizes(), contiguous_strides(t.sizes()), off), t);
        off += t.numel();
      }
    }
    works.push_back(group.broadcast(buf, 0));
    buffers.push_back(buf);
  }
  for (size_t i = 0; i < flats.size(); ++i) {
    works[i].wait();
    if (group.rank() == 0) continue;
    int64_t off = 0;
    for (const Tensor& t : flats[i].members) {
      copy_(t, buffers[i].as_strided(t.sizes(), contiguous_strides(t.sizes()), off));
      off += t.numel();
    }
  }
}

namespace {
std::vector<Tensor> trainable(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}
}  // namespace

DataParallel::DataParallel(nn::Module& model, std::shared_ptr<comm::Communicator> dp, DataParallelOptions options)
    : DataParallel(trainable(model), dp, options) {
  if (options.broadcast_from_rank0) broadcast_tensors(*dp, model.buffers(), options.bucket_bytes);
}

DataParallel::DataParallel(std::vector<Tensor> params, std::shared_ptr<comm::Communicator> dp,
                           DataParallelOptions options) {
  TRIDENT_CHECK(dp != nullptr, "DataParallel: the dp communicator is null");
  if (options.broadcast_from_rank0) broadcast_tensors(*dp, params, options.bucket_bytes);
  reducer_ = std::make_unique<GradReducer>(std::vector<std::vector<Tensor>>{std::move(params)}, std::move(dp),
                                           GradReducer::Mode::AllReduce, options.bucket_bytes, 1, options.reduce_last);
}

}  // namespace trident::parallel
