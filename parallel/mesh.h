// The device mesh: world = dp x pp x tp, tp innermost.
//
// NOTE [Mesh layout]: world rank = (dp_index * pp + pp_index) * tp + tp_index. Neighbouring ranks
// form a tensor-parallel group (on a GPU machine they share a host and its NVLink, which the two
// all-reduces per layer forward need), consecutive tp blocks form the pipeline, and data
// parallelism is outermost (one gradient all-reduce per step, so it tolerates the slowest
// links). Each rank belongs to one group per axis: the tp group holds the ranks that differ only
// in tp_index, and so on; every group is its own Communicator (split from the world), named for
// errors and counters like "tp[dp=1,pp=0]".
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace trident::parallel {

enum class Axis : uint8_t { DP, PP, TP };
std::string_view axis_name(Axis a);  // "dp", "pp", "tp"

// Sizes along each axis; one of them may be -1, meaning "what the world size leaves".
struct MeshShape {
  int dp = -1;
  int pp = 1;
  int tp = 1;
};

struct MeshCoord {
  int dp = 0, pp = 0, tp = 0;
  int operator[](Axis a) const { return a == Axis::DP ? dp : a == Axis::PP ? pp : tp; }
  bool operator==(const MeshCoord&) const = default;
};

// The arithmetic of NOTE [Mesh layout], without communicators.
class MeshLayout {
 public:
  // Resolves shape against the world size. Errors (each naming the sizes): a size that is zero
  // or below -1, more than one -1, a product that is not the world size, or sizes that do not
  // divide it when one is inferred.
  MeshLayout(int world_size, MeshShape shape);

  int world_size() const { return world_size_; }
  int size(Axis a) const { return sizes_[static_cast<size_t>(a)]; }
  int dp() const { return size(Axis::DP); }
  int pp() const { return size(Axis::PP); }
  int tp() const { return size(Axis::TP); }

  MeshCoord coord(int rank) const;
  int rank(MeshCoord c) const;
  // The world ranks of the group along `axis` that holds `rank`, ordered by their index on that
  // axis.
  std::vector<int> group_ranks(Axis axis, int rank) const;
  // "dp=2 x pp=1 x tp=2"
  std::string str() const;

 private:
  int world_size_;
  std::array<int, 3> sizes_;
};

class Mesh {
 public:
  // Collective over `world`: every rank creates the same mesh (and so the same groups, in the
  // same order). Errors in the shape are raised on every rank alike, before any communication.
  Mesh(std::shared_ptr<comm::Communicator> world, MeshShape shape);
  // On Communicator::world().
  explicit Mesh(MeshShape shape = {});

  const MeshLayout& layout() const { return layout_; }
  int size(Axis a) const { return layout_.size(a); }
  MeshCoord coord() const { return coord_; }
  // This rank's index along an axis (its rank in that axis's group).
  int index(Axis a) const { return coord_[a]; }
  int world_rank() const { return world_->rank(); }

  comm::Communicator& world() const { return *world_; }
  comm::Communicator& group(Axis a) const { return *groups_[static_cast<size_t>(a)]; }
  const std::shared_ptr<comm::Communicator>& group_ptr(Axis a) const { return groups_[static_cast<size_t>(a)]; }
  const std::shared_ptr<comm::Communicator>& world_ptr() const { return world_; }

  // "mesh dp=2 x pp=1 x tp=2, world rank 3 at (dp=1, pp=0, tp=1)"
  std::string str() const;

 private:
  std::shared_ptr<comm::Communicator> world_;
  MeshLayout layout_;
  MeshCoord coord_;
  std::array<std::shared_ptr<comm::Communicator>, 3> groups_;
};

}  // namespace trident::parallel
