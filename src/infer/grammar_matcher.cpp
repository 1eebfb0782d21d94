// The grammar matcher: parse stacks as hash-consed nodes (equal stacks are equal ids, so sets of
// stacks deduplicate by id), advanced byte by byte; allowed_tokens() runs the vocabulary trie
// against a lazily built DFA over those stack sets.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "infer/grammar.h"

namespace unillm::infer {
namespace {

using Node = GrammarMatcher::Node;

// The stacks reached by consuming some bytes: their tops (byte-set positions), and whether one
// stack emptied (the whole sentence is matched).
struct Closure {
  std::vector<uint32_t> leaves;
  bool complete = false;
};

// A working copy of a matcher's stacks that new nodes are added to while matching.
class StackArena {
 public:
  StackArena(const Grammar& g, const std::vector<Node>& nodes)
      : elems_(g.elements()), g_(g), nodes_(nodes), seen_(nodes.size(), 0) {
    index_.reserve(nodes.size() * 2 + 64);
    for (uint32_t i = 1; i < nodes_.size(); ++i) index_.emplace(key(nodes_[i]), i);
  }

  // The start state: every way into the root rule.
  void start(Closure& out) {
    begin(out);
    enter_rule(g_.root(), 0, out);
    finish(out);
  }

  // Consumes byte b on each stack topped by `leaves` (a top whose set lacks b dies).
  void advance(const std::vector<uint32_t>& leaves, uint8_t b, Closure& out) {
    begin(out);
    for (uint32_t leaf : leaves) {
      const Node n = nodes_[leaf];
      if (!g_.byte_set(elems_[n.pos].arg).has(b)) continue;
      if (elems_[n.pos + 1].kind == Grammar::kEnd) {
        expand(n.parent, out);  // the alternative is done: return to the caller
      } else {
        expand(intern(n.pos + 1, n.parent), out);
      }
    }
    finish(out);
  }

  // The nodes reachable from out's leaves, renumbered densely (parents first) into nodes/leaves.
  void export_state(const Closure& c, std::vector<Node>& nodes, std::vector<uint32_t>& leaves) {
    std::vector<uint32_t> new_id(nodes_.size(), 0);
    constexpr uint32_t kKeep = 1;
    for (uint32_t leaf : c.leaves) {
      for (uint32_t i = leaf; i != 0 && new_id[i] == 0; i = nodes_[i].parent) new_id[i] = kKeep;
    }
    nodes.assign(1, Node{0, 0});
    for (uint32_t i = 1; i < nodes_.size(); ++i) {
      if (new_id[i] == 0) continue;
      new_id[i] = static_cast<uint32_t>(nodes.size());
      nodes.push_back({nodes_[i].pos, new_id[nodes_[i].parent]});
    }
    leaves.clear();
    for (uint32_t leaf : c.leaves) leaves.push_back(new_id[leaf]);  // renumbering keeps order
  }

 private:
  static uint64_t key(const Node& n) { return (uint64_t{n.pos} << 32) | n.parent; }

  uint32_t intern(uint32_t pos, uint32_t parent) {
    auto [it, fresh] = index_.emplace(key(Node{pos, parent}), static_cast<uint32_t>(nodes_.size()));
    if (fresh) {
      nodes_.push_back({pos, parent});
      seen_.push_back(0);
    }
    return it->second;
  }

  void begin(Closure& out) {
    out.leaves.clear();
    out.complete = false;
    ++epoch_;
  }

  void finish(Closure& out) {
    std::sort(out.leaves.begin(), out.leaves.end());
    out.leaves.erase(std::unique(out.leaves.begin(), out.leaves.end()), out.leaves.end());
  }

  // Pushes each alternative of `rule` on the stack `cont` (what follows the rule).
  void enter_rule(uint32_t rule, uint32_t cont, Closure& out) {
    for (uint32_t start : g_.alternatives(rule)) {
      if (elems_[start].kind == Grammar::kEnd) {
        expand(cont, out);  // an empty alternative
      } else {
        expand(intern(start, cont), out);
      }
    }
  }

  // Follows a stack down to its byte-set tops. Each node is expanded once per closure: its
  // result is the same whichever path reached it, and ambiguous grammars reach nodes many times.
  void expand(uint32_t node, Closure& out) {
    if (seen_[node] == epoch_) return;
    seen_[node] = epoch_;
    if (node == 0) {
      out.complete = true;
      return;
    }
    const Node n = nodes_[node];
    const Grammar::Element e = elems_[n.pos];
    if (e.kind == Grammar::kBytes) {
      out.leaves.push_back(node);
      return;
    }
    // A rule reference: its continuation is the next element, or — a tail call, when the
    // reference ends its alternative — the parent, so right recursion does not deepen stacks.
    uint32_t cont =
        elems_[n.pos + 1].kind == Grammar::kEnd ? n.parent : intern(n.pos + 1, n.parent);
    enter_rule(e.arg, cont, out);
  }

  const std::vector<Grammar::Element>& elems_;
  const Grammar& g_;
  std::vector<Node> nodes_;  // nodes_[0] is the empty stack
  std::unordered_map<uint64_t, uint32_t> index_;
  std::vector<uint32_t> seen_;  // epoch in which the node was last expanded
  uint32_t epoch_ = 0;
};

// A DFA over stack sets, built on demand: one state per distinct Closure, one transition per
// (state, byte class), each computed the first time the trie walk needs it.
class LazyDfa {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;

  LazyDfa(const Grammar& g, StackArena& arena)
      : g_(g), arena_(arena), num_classes_(g.num_byte_classes()) {}

  int32_t add(const Closure& c) {
    std::string k(reinterpret_cast<const char*>(c.leaves.data()), c.leaves.size() * 4);
    k.push_back(c.complete ? 1 : 0);
    auto [it, fresh] = index_.emplace(std::move(k), static_cast<int32_t>(states_.size()));
    if (fresh) {
      states_.push_back(c.leaves);
      next_.resize(next_.size() + num_classes_, kUnknown);
      loops_.emplace_back();
      loops_known_.push_back(false);
    }
    return it->second;
  }

  bool has_leaves(int32_t s) const { return !states_[s].empty(); }

  // The bytes that lead from s back to s (computing all of s's transitions once).
  const ByteSet& self_loops(int32_t s) {
    if (!loops_known_[s]) {
      ByteSet loops;
      for (int b = 0; b < 256; ++b) {
        if (next(s, static_cast<uint8_t>(b)) == s) loops.add(static_cast<uint8_t>(b));
      }
      loops_[s] = loops;  // index again: next() may have grown loops_
      loops_known_[s] = true;
    }
    return loops_[s];
  }

  int32_t next(int32_t s, uint8_t b) {
    size_t i = static_cast<size_t>(s) * num_classes_ + g_.byte_class(b);
    if (next_[i] == kUnknown) {
      arena_.advance(states_[s], b, scratch_);
      int32_t t = scratch_.leaves.empty() && !scratch_.complete ? kDead : add(scratch_);
      next_[i] = t;  // index again: add() may have grown next_
    }
    return next_[i];
  }

 private:
  const Grammar& g_;
  StackArena& arena_;
  uint32_t num_classes_;
  std::vector<std::vector<uint32_t>> states_;  // leaves per state
  std::vector<int32_t> next_;                  // [state, class] -> state, kDead or kUnknown
  std::unordered_map<std::string, int32_t> index_;
  std::vector<ByteSet> loops_;  // self_loops() per state, once loops_known_
  std::vector<bool> loops_known_;
  Closure scratch_;
};

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  UNILLM_CHECK(g_ != nullptr, "GrammarMatcher needs a grammar");
  reset();
}

void GrammarMatcher::reset() {
  std::vector<Node> empty{Node{0, 0}};
  StackArena arena(*g_, empty);
  Closure c;
  arena.start(c);
  arena.export_state(c, nodes_, leaves_);
  complete_ = c.complete;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  if (bytes.empty()) return true;
  if (leaves_.empty()) return false;
  StackArena arena(*g_, nodes_);
  Closure cur{leaves_, complete_}, next;
  for (char c : bytes) {
    arena.advance(cur.leaves, static_cast<uint8_t>(c), next);
    if (next.leaves.empty() && !next.complete) return false;  // no stack took the byte
    std::swap(cur, next);
  }
  arena.export_state(cur, nodes_, leaves_);
  complete_ = cur.complete;
  return true;
}

// Subtrees with at least this many tokens are tried whole (below it the check costs more than
// the walk).
constexpr uint32_t kWholeSubtree = 8;

void GrammarMatcher::allowed_tokens(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  allowed.assign(trie.size(), 0);
  if (leaves_.empty()) return;
  StackArena arena(*g_, nodes_);
  LazyDfa dfa(*g_, arena);
  int32_t start = dfa.add(Closure{leaves_, complete_});
  // Depth-first over the trie: (trie node, DFA state after its prefix).
  std::vector<std::pair<uint32_t, int32_t>> todo{{0, start}};
  while (!todo.empty()) {
    auto [node, state] = todo.back();
    todo.pop_back();
    const TokenTrie::Node& n = trie.nodes_[node];
    for (uint32_t e = n.first_edge; e < n.first_edge + n.num_edges; ++e) {
      const TokenTrie::Edge edge = trie.edges_[e];
      int32_t t = dfa.next(state, edge.byte);
      if (t == LazyDfa::kDead) continue;  // the whole subtree is dead
      const TokenTrie::Node& child = trie.nodes_[edge.child];
      // A big subtree whose every byte loops t back to t (text inside a JSON string, mostly) is
      // allowed whole: its tokens are one run.
      const bool whole = child.subtree_end - child.first_token >= kWholeSubtree &&
                         dfa.has_leaves(t) &&
                         dfa.self_loops(t).includes(trie.subtree_bytes_[edge.child]);
      const uint32_t end = whole ? child.subtree_end : child.first_token + child.num_tokens;
      for (uint32_t k = child.first_token; k < end; ++k) allowed[trie.token_ids_[k]] = 1;
      if (!whole && child.num_edges > 0 && dfa.has_leaves(t)) todo.emplace_back(edge.child, t);
    }
  }
}

}  // namespace unillm::infer
