#include "parallel/mesh.h"

#include <sstream>

#include "core/error.h"

namespace trident::parallel {

std::string_view axis_name(Axis a) {
  switch (a) {
    case Axis::DP: return "dp";
    case Axis::PP: return "pp";
    case Axis::TP: return "tp";
  }
  return "?";
}

namespace {
constexpr std::array<Axis, 3> kAxes{Axis::DP, Axis::PP, Axis::TP};

std::string shape_str(const MeshShape& s) {
  auto one = [](int v) { return v == -1 ? std::string("?") : std::to_string(v); };
  return "dp=" + one(s.dp) + " x pp=" + one(s.pp) + " x tp=" + one(s.tp);
}
int world_size_of(const std::shared_ptr<comm::Communicator>& world) {
  TRIDENT_CHECK(world != nullptr, "Mesh: the world communicator is null");
  return world->size();
}
}  // namespace

MeshLayout::MeshLayout(int world_size, MeshShape shape) : world_size_(world_size), sizes_{shape.dp, shape.pp, shape.tp} {
  TRIDENT_CHECK(world_size > 0, "mesh ", shape_str(shape), ": the world size must be positive, got ", world_size);
  int inferred = -1;
  int product = 1;
  for (size_t i = 0; i < 3; ++i) {
    const int v = sizes_[i];
    TRIDENT_CHECK(v == -1 || v > 0, "mesh ", shape_str(shape), ": ", axis_name(kAxes[i]), " must be positive (or -1 ",
                  "to infer it from the world size), got ", v);
    if (v == -1) {
      TRIDENT_CHECK(inferred < 0, "mesh ", shape_str(shape), ": only one size can be inferred (-1), but ",
                    axis_name(kAxes[static_cast<size_t>(inferred)]), " and ", axis_name(kAxes[i]), " both are");
      inferred = static_cast<int>(i);
    } else {
      product *= v;
    }
  }
  if (inferred >= 0) {
    TRIDENT_CHECK(world_size % product == 0, "mesh ", shape_str(shape), ": the other sizes multiply to ", product,
                  ", which does not divide the world of ", world_size, " ranks, so ",
                  axis_name(kAxes[static_cast<size_t>(inferred)]), " cannot be inferred");
    sizes_[static_cast<size_t>(inferred)] = world_size / product;
  } else {
    TRIDENT_CHECK(product == world_size, "mesh ", shape_str(shape), " has ", product, " ranks, but the world has ",
                  world_size);
  }
}

MeshCoord MeshLayout::coord(int rank) const {
  TRIDENT_CHECK(rank >= 0 && rank < world_size_, "mesh ", str(), ": rank ", rank, " is outside the world of ",
                world_size_);
  return {rank / (pp() * tp()), (rank / tp()) % pp(), rank % tp()};
}

int MeshLayout::rank(MeshCoord c) const {
  TRIDENT_CHECK(c.dp >= 0 && c.dp < dp() && c.pp >= 0 && c.pp < pp() && c.tp >= 0 && c.tp < tp(), "mesh ", str(),
                ": coordinate (dp=", c.dp, ", pp=", c.pp, ", tp=", c.tp, ") is outside it");
  return (c.dp * pp() + c.pp) * tp() + c.tp;
}

std::vector<int> MeshLayout::group_ranks(Axis axis, int rank) const {
  MeshCoord c = coord(rank);
  std::vector<int> out;
  for (int i = 0; i < size(axis); ++i) {
    MeshCoord m = c;
    (axis == Axis::DP ? m.dp : axis == Axis::PP ? m.pp : m.tp) = i;
    out.push_back(this->rank(m));
  }
  return out;
}

std::string MeshLayout::str() const {
  return "dp=" + std::to_string(dp()) + " x pp=" + std::to_string(pp()) + " x tp=" + std::to_string(tp());
}

Mesh::Mesh(MeshShape shape) : Mesh(comm::Communicator::world(), shape) {}

Mesh::Mesh(std::shared_ptr<comm::Communicator> world, MeshShape shape)
    : world_(std::move(world)), layout_(world_size_of(world_), shape) {
  coord_ = layout_.coord(world_->rank());
  for (Axis a : kAxes) {
    // The group along `a` is the set of ranks agreeing on the other two coordinates: color them
    // by those (the group's first rank is a unique label), order them by their index on `a`.
    const std::vector<int> members = layout_.group_ranks(a, world_->rank());
    std::ostringstream name;
    name << axis_name(a) << '[';
    bool first = true;
    for (Axis o : kAxes) {
      if (o == a) continue;
      if (!first) name << ',';
      name << axis_name(o) << '=' << coord_[o];
      first = false;
    }
    name << ']';
    groups_[static_cast<size_t>(a)] = world_->split(members.front(), coord_[a], name.str());
  }
}

std::string Mesh::str() const {
  return "mesh " + layout_.str() + ", world rank " + std::to_string(world_->rank()) + " at (dp=" +
         std::to_string(coord_.dp) + ", pp=" + std::to_string(coord_.pp) + ", tp=" + std::to_string(coord_.tp) + ")";
}

}  // namespace trident::parallel
