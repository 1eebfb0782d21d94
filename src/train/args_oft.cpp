// The OFT keys (LLaMA-Factory's OFTArguments: oft_rank, oft_block_size, oft_target,
// module_dropout) and their cross-key rules; PEFT's OFTConfig rules are nn::validate_oft_config.
#include <map>

#include "core/error.h"
#include "nn/oft.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

bool set_oft_field(TrainArgs& a, const Field& f) {
  if (f.key == "oft_rank")
    a.oft_rank = get_int(f, 0);
  else if (f.key == "oft_block_size")
    a.oft_block_size = get_int(f, 0);
  else if (f.key == "oft_target")
    a.oft_target = get_list(f);
  else if (f.key == "module_dropout")
    a.module_dropout = get_number_in(f, 0, 1, false, true);
  else
    return false;
  return true;
}

void finish_oft_args(TrainArgs& a, const std::string& where, Problems& problems) {
  if (a.finetuning_type != "oft") return;
  auto fail = [&](auto&&... parts) { problems.add(UNILLM_MSG("[config] ", where, ": ", parts...), true); };
  if ((a.oft_rank != 0) == (a.oft_block_size != 0))
    fail("finetuning_type oft: set exactly one of oft_rank (", a.oft_rank, ") and oft_block_size (",
         a.oft_block_size, ") to a non-zero value (PEFT's OFTConfig: oft_rank x oft_block_size = in_features)");
  if (a.use_dora) fail("use_dora applies to LoRA, not to finetuning_type oft");
  if (a.oft_target.empty()) fail("oft_target is empty; give module names or all");
  if (a.module_dropout > 0)  // saved in adapter_config.json all the same
    a.warnings.push_back(UNILLM_MSG("[config] ", where, ": module_dropout ", a.module_dropout,
                                    " has no effect: PEFT 0.17's OFT layer never applies its dropout, "
                                    "and unillm trains as PEFT does"));
}

}  // namespace unillm::train::detail
