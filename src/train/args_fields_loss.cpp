// Setters and cross-key rules of LLaMA-Factory's SFT loss variants (use_dft_loss, use_eaft_loss,
// eaft_alpha, use_asft_loss, asft_alpha; ops/weighted_cross_entropy.h, ops/asft_cross_entropy.h).
// LLaMA-Factory reads them only in its SFT trainer and takes the first one set (dft, eaft, asft):
// unillm refuses what it would silently ignore.
#include <map>
#include <string>
#include <utility>

#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

bool set_loss_field(TrainArgs& a, const Field& f) {
  using Setter = void (*)(TrainArgs&, const Field&);
  // Any finite alpha, as LLaMA-Factory (eaft_alpha 0 / asft_alpha 0: plain SFT / DFT).
  static const std::map<std::string, Setter> m = {
      {"use_dft_loss", [](TrainArgs& a, const Field& f) { a.use_dft_loss = get_bool(f); }},
      {"use_eaft_loss", [](TrainArgs& a, const Field& f) { a.use_eaft_loss = get_bool(f); }},
      {"eaft_alpha",
       [](TrainArgs& a, const Field& f) { a.eaft_alpha = get_number(f, "(finite)"); }},
      {"use_asft_loss", [](TrainArgs& a, const Field& f) { a.use_asft_loss = get_bool(f); }},
      {"asft_alpha",
       [](TrainArgs& a, const Field& f) { a.asft_alpha = get_number(f, "(finite)"); }},
  };
  auto it = m.find(f.key);
  if (it == m.end()) return false;
  it->second(a, f);
  return true;
}

void finish_loss_args(TrainArgs& a, const std::string& where, Problems& problems) {
  auto fail = [&](auto&&... parts) {
    problems.add(UNILLM_MSG("[config] ", where, ": ", parts...), true);
  };
  std::string set;
  for (auto [on, key] :
       {std::pair{a.use_dft_loss, "use_dft_loss"}, std::pair{a.use_eaft_loss, "use_eaft_loss"},
        std::pair{a.use_asft_loss, "use_asft_loss"}})
    if (on) set += std::string(set.empty() ? "" : " and ") + key;
  if (set.find(" and ") != std::string::npos)
    fail(set,
         " are alternative SFT losses: set one (LLaMA-Factory would silently use the first of "
         "use_dft_loss, use_eaft_loss, use_asft_loss)");
  if (!set.empty() && a.stage != "sft")
    fail(set, " is an SFT loss (LLaMA-Factory's SFT trainer reads it); stage is ", a.stage);
  if (a.use_asft_loss && a.ref_mode == "precompute")
    fail(
        "use_asft_loss needs the reference model's logits, which ref_mode: precompute does not "
        "keep "
        "(use ref_mode: auto or model)");
}

}  // namespace unillm::train::detail
