// The device mesh of a parallel run (docs/ARCHITECTURE.md, "Parallel training"): world =
// pp · dp · sharding · tp ranks, tp fastest (tp peers are neighbours, so they share a host), then
// sharding, then dp, pp slowest — Megatron's and PaddleNLP's order. DeviceMesh splits the world
// into the four groups a rank belongs to.
#pragma once

#include <memory>
#include <string>

#include "dist/process_group.h"

namespace unillm::dist {

struct MeshShape {
  int pp = 1, dp = 1, sharding = 1, tp = 1;
  int world() const { return pp * dp * sharding * tp; }
  std::string str() const;  // "pp 1 × dp 2 × sharding 1 × tp 1"
};

struct MeshCoord {
  int pp = 0, dp = 0, sharding = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

// dp = world / (tp · pp · sharding). ConfigError (naming the degrees and the world size) when a
// degree is below 1 or their product does not divide the world.
MeshShape mesh_shape(int world, int tp, int pp, int sharding);
MeshCoord coord_of(const MeshShape& s, int rank);
int rank_of(const MeshShape& s, const MeshCoord& c);

class DeviceMesh {
 public:
  // Collective over `world`: every rank must call it with the same shape.
  DeviceMesh(ProcessGroup& world, const MeshShape& shape);
  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  ProcessGroup& world() { return world_; }
  ProcessGroup& tp() { return *tp_; }              // same pp, dp, sharding
  ProcessGroup& sharding() { return *sharding_; }  // same pp, dp, tp
  ProcessGroup& dp() { return *dp_; }              // same pp, sharding, tp
  ProcessGroup& pp() { return *pp_; }              // same dp, sharding, tp

 private:
  ProcessGroup& world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<ProcessGroup> tp_, sharding_, dp_, pp_;
};

}  // namespace unillm::dist
