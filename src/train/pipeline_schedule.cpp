// Pipeline schedules (see pipeline_schedule.h).
#include "train/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"

namespace unillm::train {

std::vector<PipeOp> pipeline_schedule(int pp, int v, int m, int rank) {
  UNILLM_CHECK(pp >= 1 && v >= 1 && m >= 0 && rank >= 0 && rank < pp,
               "[pipeline] bad schedule shape");
  std::vector<PipeOp> ops;
  if (m == 0)
    return ops;  // a replica without micro-batches in a step short of them (the epoch's last)
  if (v == 1) {
    // 1F1B: rank r first runs pp - r - 1 forwards (the later stages are still filling), so it
    // holds at most pp - r micro-batches' activations at once instead of m.
    const int warm = std::min(pp - rank - 1, m);
    for (int i = 0; i < warm; ++i) ops.push_back({true, i, 0});
    for (int i = 0; i < m - warm; ++i) {
      ops.push_back({true, warm + i, 0});
      ops.push_back({false, i, 0});
    }
    for (int i = m - warm; i < m; ++i) ops.push_back({false, i, 0});
    return ops;
  }
  if (m % pp != 0) {
    // The interleaved order needs whole rounds of pp micro-batches (a step short of them: the
    // epoch's last): every forward in (micro-batch, chunk) order, then every backward, chunks
    // reversed (GPipe's order; all m micro-batches' activations are held at once).
    for (int i = 0; i < m; ++i)
      for (int c = 0; c < v; ++c) ops.push_back({true, i, c});
    for (int i = 0; i < m; ++i)
      for (int c = v - 1; c >= 0; --c) ops.push_back({false, i, c});
    return ops;
  }
  // Megatron's interleaved order: the k-th forward of a rank is micro-batch (k / (pp·v))·pp + k %
  // pp on chunk (k / pp) % v; backwards run the chunks in reverse.
  const int total = m * v;
  auto op = [&](int k, bool fwd) {
    const int in_group = k % (pp * v);
    int chunk = in_group / pp;
    if (!fwd) chunk = v - 1 - chunk;
    return PipeOp{fwd, (k / (pp * v)) * pp + k % pp, chunk};
  };
  int warm = m == pp ? total : std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
  for (int k = 0; k < warm; ++k) ops.push_back(op(k, true));
  for (int k = 0; k < total - warm; ++k) {
    ops.push_back(op(warm + k, true));
    ops.push_back(op(k, false));
  }
  for (int k = total - warm; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

std::vector<std::pair<int64_t, int64_t>> pipeline_layers(int64_t num_layers, int pp, int v, double tail) {
  const int64_t stages = static_cast<int64_t>(pp) * v;
  if (num_layers < stages)
    UNILLM_THROW(ConfigError, "[pipeline] ", num_layers, " decoder layers cannot be split into ",
                 stages, " pipeline stages (pipeline_parallel_degree ", pp, " × virtual_pp_degree ",
                 v, ")");
  // The last stage's layer count k: the others share num_layers - k evenly; the smallest k with
  // the least costly busiest stage (ties leave the extra layers to earlier stages).
  int64_t last = num_layers;
  if (stages > 1) {
    double best = 0;
    for (int64_t k = 1; k <= num_layers - (stages - 1); ++k) {
      const int64_t rest = num_layers - k;
      const double busiest =
          std::max(static_cast<double>((rest + stages - 2) / (stages - 1)), static_cast<double>(k) + tail);
      if (k == 1 || busiest < best - 1e-9) best = busiest, last = k;
    }
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  const int64_t rest = num_layers - last, others = stages - 1;
  for (int64_t g = 0; g < others; ++g) {
    const int64_t n = rest / others + (g < rest % others ? 1 : 0);
    out.emplace_back(at, at + n);
    at += n;
  }
  out.emplace_back(at, num_layers);
  return out;
}

std::vector<int64_t> pipeline_live_per_layer(int64_t num_layers, int pp, int v, int m, int rank, double tail) {
  const auto layers = pipeline_layers(num_layers, pp, v, tail);
  auto chunk_layers = [&](int c) {
    const auto [lo, hi] = layers[static_cast<size_t>(c * pp + rank)];
    return hi - lo;
  };
  std::vector<int64_t> live(static_cast<size_t>(v), 0), peak = live;
  int64_t most = -1;
  for (const PipeOp& o : pipeline_schedule(pp, v, m, rank)) {
    live[static_cast<size_t>(o.chunk)] += o.forward ? 1 : -1;
    int64_t held = 0;
    for (int c = 0; c < v; ++c) held += live[static_cast<size_t>(c)] * chunk_layers(c);
    if (held > most) most = held, peak = live;
  }
  std::vector<int64_t> out(static_cast<size_t>(num_layers), 0);
  for (int c = 0; c < v; ++c) {
    const auto [lo, hi] = layers[static_cast<size_t>(c * pp + rank)];
    for (int64_t l = lo; l < hi; ++l) out[static_cast<size_t>(l)] = peak[static_cast<size_t>(c)];
  }
  return out;
}

std::string schedule_text(const std::vector<PipeOp>& ops, int v) {
  std::string s;
  for (const PipeOp& o : ops) {
    if (!s.empty()) s += ' ';
    s += (o.forward ? "F" : "B") + std::to_string(o.micro);
    if (v > 1) s += "." + std::to_string(o.chunk);
  }
  return s;
}

std::string simulate_schedule(int pp, int v, int m) {
  std::vector<std::vector<PipeOp>> ops(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) ops[static_cast<size_t>(r)] = pipeline_schedule(pp, v, m, r);
  return simulate_ops(pp, v, m, ops);
}

std::string simulate_ops(int pp, int v, int m, const std::vector<std::vector<PipeOp>>& ops) {
  const int stages = pp * v;
  std::vector<size_t> at(pp, 0);
  // Messages sent and not yet received, per channel (forward?, receiving virtual stage), in the
  // order sent: the trainer tags a message by its channel only, so MPI's non-overtaking order must
  // deliver them in the order the receiver asks for them.
  std::map<std::pair<bool, int>, std::deque<int>> sent;
  std::string wrong;
  auto take = [&](bool fwd, int g, int micro) {
    auto& q = sent[{fwd, g}];
    if (q.empty()) return false;
    if (q.front() != micro && wrong.empty())
      wrong = std::string(fwd ? "forward" : "backward") + " messages to virtual stage " +
              std::to_string(g) + " arrive out of order (" + std::to_string(q.front()) +
              " before " + std::to_string(micro) + ")";
    q.pop_front();
    return true;
  };
  std::set<std::tuple<int, int>> forwarded;  // (virtual stage, micro) whose forward ran
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r) {
      while (at[r] < ops[r].size()) {
        const PipeOp o = ops[r][at[r]];
        const int g = o.chunk * pp + r;
        if (o.forward) {
          if (g > 0 && !take(true, g, o.micro)) break;  // waits for its input
          forwarded.insert({g, o.micro});
          if (g + 1 < stages) sent[{true, g + 1}].push_back(o.micro);
        } else {
          if (!forwarded.count({g, o.micro}))
            return "rank " + std::to_string(r) + " runs the backward of micro-batch " +
                   std::to_string(o.micro) + " before its forward";
          if (g + 1 < stages && !take(false, g, o.micro)) break;  // waits for its gradient
          if (g > 0) sent[{false, g - 1}].push_back(o.micro);
        }
        ++at[r];
        moved = true;
      }
    }
  }
  std::string stuck = wrong;
  for (int r = 0; r < pp; ++r)
    if (at[r] < ops[r].size()) {
      const PipeOp o = ops[r][at[r]];
      stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
               " waits at " + (o.forward ? "F" : "B") + std::to_string(o.micro) + "." +
               std::to_string(o.chunk);
    }
  for (int r = 0; r < pp; ++r) {
    int f = 0, b = 0;
    for (const PipeOp& o : ops[r]) (o.forward ? f : b)++;
    if (f != m * v || b != m * v)
      stuck += " rank " + std::to_string(r) + " has the wrong number of ops";
  }
  return stuck;
}

}  // namespace unillm::train
