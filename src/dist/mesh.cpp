// The device mesh (mesh.h).
#include "dist/mesh.h"

#include "core/error.h"

namespace unillm::dist {

std::string MeshShape::str() const {
  return "pp " + std::to_string(pp) + " × dp " + std::to_string(dp) + " × sharding " + std::to_string(sharding) +
         " × tp " + std::to_string(tp);
}

MeshShape mesh_shape(int world, int tp, int pp, int sharding) {
  if (world < 1 || tp < 1 || pp < 1 || sharding < 1)
    UNILLM_THROW(ConfigError, "[dist] parallel degrees must be >= 1: world ", world, ", tensor_parallel_degree ", tp,
                 ", pipeline_parallel_degree ", pp, ", sharding_parallel_degree ", sharding);
  const int64_t inner = static_cast<int64_t>(tp) * pp * sharding;
  if (world % inner != 0)
    UNILLM_THROW(ConfigError, "[dist] ", world, " processes cannot be split into tensor_parallel_degree ", tp,
                 " × pipeline_parallel_degree ", pp, " × sharding_parallel_degree ", sharding,
                 " (their product ", inner, " must divide the number of processes)");
  return {pp, static_cast<int>(world / inner), sharding, tp};
}

MeshCoord coord_of(const MeshShape& s, int rank) {
  if (rank < 0 || rank >= s.world())
    UNILLM_THROW(ShapeError, "[dist] rank ", rank, " is outside a mesh of ", s.world(), " (", s.str(), ")");
  MeshCoord c;
  c.tp = rank % s.tp;
  rank /= s.tp;
  c.sharding = rank % s.sharding;
  rank /= s.sharding;
  c.dp = rank % s.dp;
  c.pp = rank / s.dp;
  return c;
}

int rank_of(const MeshShape& s, const MeshCoord& c) {
  return ((c.pp * s.dp + c.dp) * s.sharding + c.sharding) * s.tp + c.tp;
}

DeviceMesh::DeviceMesh(ProcessGroup& world, const MeshShape& shape) : world_(world), shape_(shape) {
  if (shape.world() != world.size())
    UNILLM_THROW(ConfigError, "[dist] the mesh ", shape.str(), " needs ", shape.world(), " processes; ", world.size(),
                 " were started");
  coord_ = coord_of(shape, world.rank());
  const MeshCoord& c = coord_;
  // Each group: the ranks agreeing on the other three coordinates (color), ordered along its own.
  auto color = [&](int a, int b, int c3, int nb, int nc) { return (a * nb + b) * nc + c3; };
  tp_ = world.split(color(c.pp, c.dp, c.sharding, shape.dp, shape.sharding), c.tp);
  sharding_ = world.split(color(c.pp, c.dp, c.tp, shape.dp, shape.tp), c.sharding);
  dp_ = world.split(color(c.pp, c.sharding, c.tp, shape.sharding, shape.tp), c.dp);
  pp_ = world.split(color(c.dp, c.sharding, c.tp, shape.sharding, shape.tp), c.pp);
}

}  // namespace unillm::dist
