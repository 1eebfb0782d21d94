// The fused cross-entropy's three f32 GEMMs for one chunk of rows against the lm_head W [V, C],
// split over the vocabulary: part p owns W rows [V·p/P, V·(p+1)/P) and runs single-threaded
// sgemms on them, so each thread packs only its part of W. With OpenBLAS's own threading every
// thread packed all of W for dx (its split is over the chunk's rows); measured on stories15M's
// 262-row chunks (gemm_bench CrossEntropyGemm kinds 0-2 against 3-5): 69.4 -> 62.1 ms a chunk.
// A bf16/f16 W is converted a sub-panel of about 1 MiB of f32 at a time by the thread that uses
// it (no shared 8 MiB panel). dx adds the parts' partial products in part order: results are
// bit-identical for a given thread count.
// Under bf16 compute (bf16_compute.h) there is no split: W is taken as bf16 once (converted when
// f32) and each product is one multi-threaded bf16 GEMM of the whole chunk.
#pragma once

#include <cstdint>

#include "backends/cpu/scratch.h"
#include "core/dtype.h"

namespace unillm::cpu {

class VocabSplitGemm {
 public:
  // w [v, c] in f32/bf16/f16; dx products of at most max_rows rows.
  VocabSplitGemm(const void* w, DType wt, int64_t v, int64_t c, int64_t max_rows);

  // logits[r, v] = x[r, c] · Wᵀ.
  void logits(const float* x, int64_t r, float* logits);
  // dx[r, c] = dl[r, v] · W.
  void dx(const float* dl, int64_t r, float* dx);
  // dw[v, c] = (or +=, when accumulate) dl[r, v]ᵀ · x[r, c].
  // dw after dx with the same dl reuses dx's bf16 copy of it (bf16 compute).
  void dw(const float* dl, const float* x, int64_t r, float* dw, bool accumulate);

 private:
  // W rows [s, s + rows) as f32: W itself, or part p's panel after converting them into it.
  const float* rows_f32(int64_t p, int64_t s, int64_t rows);
  template <typename Fn>
  void each_part(Fn&& fn) const;

  // dl [r, v] as bf16, converted once for dx and dw.
  const uint16_t* dl_bf16(const float* dl, int64_t r);

  const void* w_;
  DType wt_;
  bool bf16_;  // bf16 compute
  int64_t v_, c_, parts_, panel_rows_;
  Scratch<float> panels_;   // parts_ × panel_rows_ × c_ (bf16/f16 W only)
  Scratch<float> partial_;  // parts_ × max_rows × c_ (when parts_ > 1)
  ScratchBuffer<uint16_t> w16_, x16_, dl16_;  // bf16 compute: W (when f32), x and dl
  const uint16_t* wb_ = nullptr;
  const float* dl16_of_ = nullptr;  // the dl that dl16_ holds, valid until the next logits()
};

}  // namespace unillm::cpu
