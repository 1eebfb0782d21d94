// Tensor parallelism in a training run (nn/tensor_parallel.h): the mesh's tp group handed to the
// model as a Collective, and the one correction the gradient sum needs. Every process holds the
// whole model; a rank's split layers write only their blocks of the weights' gradients (zeros
// elsewhere), while the parameters every rank of the group computes whole — norms, embedding,
// lm_head, a value head — get the same gradient on each. Rank 0 of the group keeps those and the
// others drop them, so the data-parallel path's sum over all processes (allreduce or ZeRO's
// reduce-scatter) gives one process's gradients, and clipping, the optimizers, checkpoints and
// resume need nothing else.
#include <set>

#include "train/trainer_run.h"

namespace unillm::train::detail {

namespace {

// dist's process group as the model's Collective.
class GroupCollective : public nn::Collective {
 public:
  explicit GroupCollective(dist::ProcessGroup& g) : g_(g) {}
  int rank() const override { return g_.rank(); }
  int size() const override { return g_.size(); }
  void allreduce_sum(Tensor& t) override { g_.allreduce(t, dist::ReduceOp::sum); }

 private:
  dist::ProcessGroup& g_;
};

}  // namespace

void Run::setup_tensor_parallel() {
  if (a_.tensor_degree == 1) return;
  tp_group_ = std::make_unique<GroupCollective>(model_mesh_->tp());
  try {
    model_->set_tensor_parallel(tp_group_.get());
  } catch (const ConfigError& e) {
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": tensor_parallel_degree ", a_.tensor_degree, ": ",
                 e.what());
  }
  std::set<const void*> split;
  for (const Tensor* t : model_->tensor_parallel_tensors())
    if (t->defined()) split.insert(t->raw_data());
  std::vector<nn::Module*> trained{&model_->module()};
  for (nn::Module* m : stage_->extra_modules()) trained.push_back(m);
  for (nn::Module* m : trained)
    for (const nn::ParamRef& p : m->parameters())
      if (p.tensor->requires_grad() && !split.count(p.tensor->raw_data())) tp_replicated_.push_back(p.tensor);
  say(UNILLM_MSG("tensor parallel: ", a_.tensor_degree, " processes split each layer's attention heads (q/k/v "
                 "column-parallel, o_proj row-parallel) and MLP rows (gate/up column-, down_proj row-parallel); "
                 "the embedding, norms and lm_head are computed whole on each; every process holds the whole "
                 "model (tensor-parallel rank ",
                 tp_rank(), ")"));
}

void Run::drop_replicated_grads() {
  if (!tp_group_ || counts_loss()) return;
  for (const Tensor* t : tp_replicated_) {
    Tensor g = t->grad();
    if (g.defined()) g.fill(0);
  }
}

}  // namespace unillm::train::detail
