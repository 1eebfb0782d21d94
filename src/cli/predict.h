// do_predict with predict_with_generate on LLaMA-Factory data (its examples/extras/nlg_eval): a
// response generated for every eval_dataset prompt through the serving engine, written as
// generated_predictions.jsonl ({"prompt", "predict", "label"}) with predict_results.json (BLEU-4,
// ROUGE-1/2/L exactly as its sft/metric.py; eval/similarity.h) into output_dir.
#pragma once

#include "dist/process_group.h"
#include "train/args.h"

namespace unillm::cli {

// after_training: output_dir holds the weights just trained (full/freeze: the model; LoRA: the
// adapter over model_name_or_path and the adapters it built on), else model_name_or_path with
// adapter_name_or_path are used as given. Under several processes (group, every rank calls it)
// each generates every size-th prompt from its rank on, with the seed the prompt has in the
// whole set, and rank 0 gathers the ids and writes the files: one process's output, shared.
void predict_with_generate(const train::TrainArgs& a, bool after_training, dist::ProcessGroup* group = nullptr);

}  // namespace unillm::cli
