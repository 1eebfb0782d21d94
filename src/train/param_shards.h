// ZeRO stage 3's parameter sharding (docs/ARCHITECTURE.md, "Parallel training"): every
// parameter of the model, trainable or frozen, belongs to a unit (one per decoder layer, a trained
// model's lm_head or tied embedding as the head unit, one root unit for the rest); each rank keeps 1/W of each unit's flat buffers, and a unit's whole
// parameters exist only while it is gathered — around its layer's forward, again for its
// backward (with a gradient buffer that is reduce-scattered into the rank's piece as backward
// leaves the layer), and for whole-model phases (saving: ParamShards::Whole). Evaluation gathers
// the root unit (ParamShards::Root) and each layer around its forward, as training does.
// A frozen model (the preference stages' reference copy) is sharded the same way without an
// arena: its layers are gathered around their forward and its root unit stays whole. Both can be
// read straight into their shards (begin_load / begin_frozen_load, before_copy, loaded), one
// layer whole at a time.
//
// The parameters are re-pointed once to views of their unit's storages, whose memory comes and
// goes (Storage::refill/release), so module code, saved autograd tensors and recompute closures
// need no change. The trainable pieces live in ZeroOptimizer's shard (its stage 3), which steps
// them; this class only moves them.
//
// keep_whole (ZeRO stage 2): the same units, gradient buffers and reduce-scatters, but the
// parameters stay whole where they are (the arena; frozen ones are no unit's), so only the
// gradients are sharded; gathers and releases move no parameter. The shard's parameters are a
// copy of this rank's pieces that exists only around the optimizer's step (before_step copies
// them out of the arena, after_step all-gathers the stepped pieces into it a unit at a time and
// lets the copy go), so between steps a rank holds the whole parameters, 1/W of the gradients
// plus the units backward is in, and 1/W of the optimizer state.
//
// Owners (pipeline stages holding only their own layers): the group is a pipeline's stages and
// each unit belongs whole to the stage that runs it (a layer to its stage, the embedding to the
// first, the root unit and the head to the last; a tied embedding is also borrowed, whole, by the
// first stage). An owned unit's trainable parameters and gradients are views of the shard itself
// (this rank's pieces are its owned units, whole), its frozen parameters stay resident; a foreign
// unit holds no memory. Training's hooks do nothing (a stage runs only what it owns); inside the
// whole-model scopes (Whole, Root, Streamed) a gather is the owner's broadcast, so evaluation and
// saving work as under stage 3. The borrowed embedding's gradient goes to its owner before the
// gradients are reduced (before_reduce) and the stepped rows come back after the step. Loading
// (begin_load, before_copy, loaded) reads each unit whole and keeps it only where it is owned.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"
#include "train/arena.h"
#include "train/zero.h"

namespace unillm::train {

class ParamShards {
 public:
  // The units of `modules`' parameters over `group` (the model's module first: its
  // "model.layers.<i>." parameters make unit i + 1, its embedding a unit of its own unless it is
  // tied to the lm_head, the lm_head (or the tied embedding) the head unit, everything else
  // unit 0). Computes the layout only; the parameters stay
  // whole until shard().
  ParamShards(const std::vector<nn::Module*>& modules, bool tied_embedding, const ParamArena& arena,
              dist::ProcessGroup& group, bool keep_whole = false);
  // Owners: layer i's unit belongs to rank layer_owner[i] of `group`, the embedding to rank 0, the
  // root and head units to the last rank; a tied embedding is borrowed by rank 0 too.
  struct Owners {
    std::vector<int> layer_owner;
  };
  ParamShards(const std::vector<nn::Module*>& modules, bool tied_embedding, const ParamArena& arena,
              dist::ProcessGroup& group, const Owners& owners);
  // A model whose every parameter is frozen (a reference copy): shard_frozen() shards it.
  ParamShards(nn::Module& frozen_model, bool tied_embedding, dist::ProcessGroup& group);
  // The same by owner (a reference copy beside pipeline stages holding their own layers): each
  // unit whole on its stage, a tied embedding (in the root unit, the last stage's) resident on the
  // first stage too, which looks it up.
  ParamShards(nn::Module& frozen_model, bool tied_embedding, dist::ProcessGroup& group, const Owners& owners);
  ParamShards(const ParamShards&) = delete;
  ParamShards& operator=(const ParamShards&) = delete;

  // Every rank's pieces of the trainable arena, for ZeroOptimizer's stage 3.
  ZeroPieces pieces() const;
  // Keeps this rank's pieces of the frozen parameters, points every parameter at its unit's
  // (released) storage, and releases the whole arena: from here on the parameters hold memory
  // only while gathered. `shard` is ZeroOptimizer::shard(), already holding this rank's
  // trainable pieces. keep_whole: only the gradients are pointed at the units' buffers; the
  // arena stays.
  void shard(ParamArena& arena, ParamArena& shard);
  bool keeps_whole() const { return keep_whole_; }
  bool by_owner() const { return by_owner_; }
  // Owners: the borrowed embedding's gradient added into its owner's (point to point between the
  // first and the last stage); before the gradients are summed over the stage's replicas.
  void before_reduce();
  // Around the optimizer's step (keep_whole; nothing to do otherwise): the shard's parameters
  // made from the arena, then every rank's stepped pieces all-gathered into it (a collective).
  // Owners: after_step sends the stepped borrowed embedding back to the first stage.
  void before_step();
  void after_step();
  // The frozen model's shard(): every unit kept as this rank's piece, the root unit gathered for
  // good (the reference's lm_head and final norm are read outside the layers, by ASFT's loss).
  // By owner: each stage keeps its own units whole (the root unit is the last stage's, which runs
  // the reference's loss), the others hold no memory.
  void shard_frozen();
  // The same, loaded straight into the shards (models::LoadOptions' on_built, before_copy, then
  // loaded): the parameters are re-pointed to their units' storages before any weight is read;
  // a unit gets memory when its first parameter is about to be read and is cut to this rank's
  // piece when the next unit's is, so one layer is whole at a time (the root unit throughout).
  // The model's parameters are read unit by unit (each decoder layer's together).
  void begin_frozen_load();
  void before_copy(const Tensor& param);
  void loaded();
  // The policy loaded the same way (its arena lazy, ParamArena's `lazy`): `shard` is
  // ZeroOptimizer's (its pieces still zero), which each unit's trainable piece is cut into as the
  // frozen piece is; the values the arena kept (ParamArena::take_initial_values) and those of the
  // frozen parameters holding memory are placed in each unit before its weights are read. Then
  // before_copy and loaded() as above; the root unit is cut and released at the end.
  void begin_load(ParamArena& arena, ParamArena& shard);

  // The model's layer hooks (CausalLM::LayerHooks and the layer-backward hook).
  void before_forward(int64_t layer);
  void after_forward(int64_t layer);
  void before_backward(int64_t layer);
  void after_backward(int64_t layer);
  // Around one micro-batch's forward and backward: the root unit is gathered (with its gradient
  // buffer) for the whole micro-batch; end_micro() reduces the layers whose backward did not
  // report leaving (the first layer under a frozen embedding), then the root, and frees them.
  // stand_in: this micro-batch only keeps the collectives in step with the other processes (its
  // gradients are replaced by zeros in each reduction).
  // eager_head: the micro-batch's loss is an eager-gradient one (the model's token loss, whose
  // backward reads no weight): the head unit (lm_head, or the tied embedding) is gathered
  // without a gradient buffer and swaps its weights for one as backward starts
  // (before_backward(models::CausalLM::kHeadLayer)), so the head is never held twice beside the
  // loss's own dW.
  // head = false: the head unit is not gathered at all (a pipeline stage that neither looks up
  // a tied embedding nor runs the loss).
  void begin_micro(bool stand_in = false, bool eager_head = false, bool head = true);
  void end_micro();

  // Every unit gathered for a whole-model phase (evaluation, saving), freed when it ends. Nests.
  // trainable_only: only the trainable parameters are gathered (a LoRA checkpoint writes the
  // adapter, not the frozen base, which then stays sharded); such a scope does not nest.
  class Whole {
   public:
    explicit Whole(ParamShards* s, bool trainable_only = false);  // null: nothing to do
    ~Whole();
    Whole(const Whole&) = delete;
    Whole& operator=(const Whole&) = delete;

   private:
    ParamShards* s_;
  };

  // The root unit gathered without gradients for a no-grad pass (evaluation, predict, a
  // precomputed reference), the layers gathering around their forward as in training. Nests
  // inside Whole; nothing to do when the root is already gathered.
  class Root {
   public:
    explicit Root(ParamShards* s);  // null: nothing to do
    ~Root();
    Root(const Root&) = delete;
    Root& operator=(const Root&) = delete;

   private:
    ParamShards* s_;
    bool gathered_ = false;
  };

  // Saving a unit at a time: the writer (rank 0 of the group) reads the model's tensors one after
  // another, asking for each one's unit just before (read(), io::BeforeRead); the other ranks'
  // constructor serves the same gathers until the writer's scope ends (a broadcast of each unit's
  // index, then -1). One layer unit is held at a time; the root unit for the whole scope (a
  // value head is written beside the weights).
  class Streamed {
   public:
    Streamed(ParamShards* s, bool writer);  // null: nothing to do
    ~Streamed();
    Streamed(const Streamed&) = delete;
    Streamed& operator=(const Streamed&) = delete;
    // Writer: gathers t's unit (releasing the one held before) unless held; a tensor of no unit
    // is left alone.
    void read(const Tensor& t);

   private:
    void hold(int64_t unit);  // every rank: release the held unit, gather `unit`
    ParamShards* s_;
    bool writer_ = false;
    bool root_ = false;  // the root unit was gathered by this scope
    int64_t held_ = -1;
  };

  // Tensor parallelism's one correction (train/trainer_tensor_parallel.cpp): the parameters every
  // process of a tensor-parallel group computes whole get their gradient from its rank 0 only, so
  // the other ranks zero theirs in each unit's gradient buffer before it is reduced.
  void drop_gradients_of(const std::vector<const Tensor*>& params);
  // True on every rank when every rank's trainable pieces are finite (a collective).
  bool all_finite();
  // "N units, this process keeps X of Y parameter bytes" for the run's log.
  std::string describe() const;
  // keep_whole's "N units: this process keeps X of Y MiB of gradients …" for the run's log.
  std::string describe_gradients() const;
  // Bytes this process keeps between uses: its pieces of every unit, padding included.
  int64_t kept_bytes() const;

 private:
  struct Param {
    Tensor* tensor = nullptr;
    bool trainable = false;
    int64_t at = 0;  // elements into the unit's trainable buffer, or bytes into its frozen one
    int64_t arena_offset = 0;  // trainable: the arena's element offset
    Tensor initial;  // a load's value for it, placed when its unit gets memory (begin_load)
    bool drop_grad = false;  // drop_gradients_of
  };
  struct Unit {
    std::vector<Param> params;
    int64_t train_numel = 0, train_per = 0;  // elements, and each rank's piece (padded)
    int64_t shard_at = 0;  // where this rank's trainable piece starts in the shard
    int64_t frozen_bytes = 0, frozen_per = 0;  // bytes, and each rank's piece in i32 words
    std::shared_ptr<Storage> train, grad, frozen;  // whole buffers, memory only while gathered
    Tensor frozen_piece;  // [frozen_per] i32: this rank's bytes
    bool gathered = false, with_grads = false, forward = false;
    int owner = -1;  // owners: the rank holding it (-1: every rank holds pieces)
    bool borrowed = false;  // owners: a copy resident on this non-owner rank (the tied embedding)
    int open = 0;  // backwards between before_backward and the reduction
  };
  void layout(const std::vector<nn::Module*>& modules, bool tied_embedding, const ParamArena* arena);
  void assign_owners(const Owners& owners, bool tied_embedding);
  bool resident(const Unit& u) const { return u.owner == group_.rank() || u.borrowed; }
  void shard_by_owner(ParamArena& arena, ParamArena& shard);
  void shard_frozen_by_owner();  // shard_frozen() of a frozen model by owner
  void gather_from_owner(Unit& u, bool frozen);
  Tensor owned_train(const Unit& u) const;  // the owner's whole trainable unit: a range of the shard
  void send_borrowed();  // owners, after the step: the stepped tied embedding to the first stage
  static std::shared_ptr<Storage> released(int64_t bytes, Device device);  // no memory until refill()
  void gather(Unit& u, bool grads, bool frozen = true);
  void keep_pieces(Unit& u);  // this rank's bytes of the unit's frozen parameters, and the views
  void make_storages(Unit& u);  // the unit's (released) storages
  int64_t train_whole(const Unit& u) const;  // elements of the unit's whole trainable buffer (padded)
  int64_t frozen_words(const Unit& u) const;  // i32 words of its whole frozen buffer (padded)
  void keep_owned(Unit& u);  // owners' cut_to_piece: an owned unit's trainable values into the shard
  void point_at_shard(Unit& u);  // an owned unit's trainable parameters made views of the shard
  void repoint(Unit& u);  // the unit's parameters made views of its storages
  void start_load();  // every unit re-pointed to its (released) storages, the root filled
  void fill_for_load(Unit& u);  // memory for a unit about to be read: zeros and the initial values
  void finish_unit(int64_t i);  // a read unit cut to this rank's pieces and released
  void cut_to_piece(Unit& u);  // a loaded unit: this rank's bytes kept, the whole released
  int64_t unit_of(const Tensor& t) const;  // -1: no unit's storage
  void release(Unit& u);
  void reduce(Unit& u);  // reduce-scatters the gradient buffer into this rank's piece, frees it
  Unit* layer_unit(int64_t layer);  // -1: the embedding's unit (null when it has none)

  dist::ProcessGroup& group_;
  Device device_;
  bool frozen_model_ = false;  // shard_frozen(): no arena, the root unit stays gathered
  int64_t loading_ = -1;  // begin_frozen_load(): the unit being read (-1: none yet)
  std::vector<bool> loaded_;  // per unit: read and cut
  std::vector<Unit> units_;  // [0] root, [i + 1] layer i, then an untied embedding's unit, then the head's
  int64_t embedding_unit_ = -1;
  int64_t head_unit_ = -1;  // the lm_head or tied embedding of a trained model (not a frozen one)
  int64_t layers_end_ = 0;  // units [1, layers_end_) are the decoder layers'
  bool head_eager_ = false;  // this micro-batch's head swaps weights for gradients (begin_micro)
  ParamArena* shard_ = nullptr;
  int whole_ = 0;  // Whole scopes open
  bool sharded_ = false;
  bool stand_in_ = false;
  bool keep_whole_ = false;
  bool by_owner_ = false;
  bool borrowed_by_first_ = false;  // owners: the head unit is the tied embedding, which rank 0 borrows
  int scopes_ = 0;  // owners: whole-model scopes open (their hooks communicate only inside one)
  ParamArena* arena_ = nullptr;  // keep_whole: the whole parameters
};

}  // namespace unillm::train
