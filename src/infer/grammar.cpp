// Grammar building (checks, flattening, byte classes) and the vocabulary trie. The matcher is in
// grammar_matcher.cpp.
#include "infer/grammar.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "core/error.h"

namespace unillm::infer {

ByteSet ByteSet::chars(std::string_view spec) {
  ByteSet s;
  for (size_t i = 0; i < spec.size(); ++i) {
    auto lo = static_cast<uint8_t>(spec[i]);
    if (i + 2 < spec.size() && spec[i + 1] == '-') {
      s.add(lo, static_cast<uint8_t>(spec[i + 2]));
      i += 2;
    } else {
      s.add(lo);
    }
  }
  return s;
}

ByteSet& ByteSet::add(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  return *this;
}

ByteSet ByteSet::complement() const {
  ByteSet s;
  for (int i = 0; i < 4; ++i) s.w_[i] = ~w_[i];
  return s;
}

namespace bnf {

Symbols lit(std::string_view text) {
  Symbols out;
  for (char c : text) out.push_back(bytes(ByteSet::of(static_cast<uint8_t>(c))));
  return out;
}

}  // namespace bnf

using bnf::ref;
using bnf::seq;
using bnf::Symbol;
using bnf::Symbols;

int32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  defined_.push_back(false);
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, std::vector<Symbols> alternatives) {
  UNILLM_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size(), "no rule ", rule);
  UNILLM_CHECK(!defined_[rule], "rule '", names_[rule], "' is defined twice");
  UNILLM_CHECK(!alternatives.empty(), "rule '", names_[rule], "' has no alternative");
  rules_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

int32_t GrammarBuilder::add(std::string name, std::vector<Symbols> alternatives) {
  int32_t r = declare(std::move(name));
  define(r, std::move(alternatives));
  return r;
}

int32_t GrammarBuilder::repeat(const std::string& name, const Symbols& item, int min, int max) {
  UNILLM_CHECK(min >= 0 && (max < 0 || max >= min), "bad repeat {", min, ",", max, "}");
  Symbols body;
  for (int i = 0; i < min; ++i) append(body, item);
  if (max < 0) {
    // star ::= item star | "" — right recursion: the matcher's tail calls keep stacks flat.
    int32_t star = declare(name + "*");
    define(star, {seq(item, ref(star)), {}});
    body.push_back(ref(star));
  } else if (max > min) {
    // opt_k ::= item opt_{k-1} | "" — up to k more items.
    int32_t opt = add(name + "?", {item, {}});
    for (int k = 2; k <= max - min; ++k) opt = add(name + "?", {seq(item, ref(opt)), {}});
    body.push_back(ref(opt));
  }
  return add(name, {body});
}

std::string GrammarBuilder::left_recursion() const {
  const size_t n = rules_.size();
  // nullable: the rule can match "" (fixpoint over the rules).
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Symbols& alt : rules_[r]) {
        bool all = std::all_of(alt.begin(), alt.end(),
                               [&](const Symbol& s) { return s.rule >= 0 && nullable[s.rule]; });
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left corners: r -> s when s can start r before any byte is consumed.
  std::vector<std::vector<int32_t>> corners(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Symbols& alt : rules_[r]) {
      for (const Symbol& s : alt) {
        if (s.rule < 0) break;
        corners[r].push_back(s.rule);
        if (!nullable[s.rule]) break;
      }
    }
  }
  // Depth-first search for a cycle; `path` is the grey chain.
  std::vector<uint8_t> color(n, 0);  // 0 white, 1 grey, 2 black
  std::vector<int32_t> path;
  std::string cycle;
  auto dfs = [&](auto&& self, int32_t r) -> bool {
    color[r] = 1;
    path.push_back(r);
    for (int32_t s : corners[r]) {
      if (color[s] == 1) {
        auto it = std::find(path.begin(), path.end(), s);
        for (; it != path.end(); ++it) cycle += names_[*it] + " -> ";
        cycle += names_[s];
        return true;
      }
      if (color[s] == 0 && self(self, s)) return true;
    }
    path.pop_back();
    color[r] = 2;
    return false;
  };
  for (size_t r = 0; r < n; ++r) {
    if (color[r] == 0 && dfs(dfs, static_cast<int32_t>(r))) return cycle;
  }
  return "";
}

namespace {

// Splits the 256 bytes into classes no set of the grammar tells apart; returns their number.
uint32_t compute_byte_classes(const std::vector<ByteSet>& sets,
                              std::array<uint32_t, 256>& class_of) {
  class_of.fill(0);
  uint32_t num = 1;
  for (const ByteSet& s : sets) {
    std::map<std::pair<uint32_t, bool>, uint32_t> split;
    for (int b = 0; b < 256; ++b) {
      auto key = std::make_pair(class_of[b], s.has(static_cast<uint8_t>(b)));
      auto it = split.emplace(key, static_cast<uint32_t>(split.size())).first;
      class_of[b] = it->second;
    }
    num = static_cast<uint32_t>(split.size());
  }
  return num;
}

}  // namespace

std::shared_ptr<const Grammar> GrammarBuilder::build(int32_t root) const {
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (!defined_[r])
      UNILLM_THROW(ConfigError, "[grammar] rule '", names_[r], "' is never defined");
  }
  if (root < 0 || static_cast<size_t>(root) >= rules_.size())
    UNILLM_THROW(ConfigError, "[grammar] root rule ", root, " does not exist");
  std::string cycle = left_recursion();
  if (!cycle.empty()) UNILLM_THROW(ConfigError, "[grammar] left recursion: ", cycle);

  auto g = std::make_shared<Grammar>();
  g->root_ = static_cast<uint32_t>(root);
  g->names_ = names_;
  g->rule_alts_.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Symbols& alt : rules_[r]) {
      g->rule_alts_[r].push_back(static_cast<uint32_t>(g->elements_.size()));
      for (const Symbol& s : alt) {
        if (s.rule >= 0) {
          g->elements_.push_back({Grammar::kRule, static_cast<uint32_t>(s.rule)});
          continue;
        }
        UNILLM_CHECK(!s.bytes.empty(), "rule '", names_[r], "' has an empty byte set");
        auto it = std::find(g->sets_.begin(), g->sets_.end(), s.bytes);
        if (it == g->sets_.end()) it = g->sets_.insert(g->sets_.end(), s.bytes);
        g->elements_.push_back({Grammar::kBytes, static_cast<uint32_t>(it - g->sets_.begin())});
      }
      g->elements_.push_back({Grammar::kEnd, 0});
    }
  }
  g->num_classes_ = compute_byte_classes(g->sets_, g->class_of_);
  return g;
}

namespace {

std::string byte_text(uint8_t b) {
  if (b == '\\' || b == ']' || b == '-' || b == '"') return std::string("\\") + char(b);
  if (b >= 0x20 && b < 0x7f) return std::string(1, char(b));
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", b);
  return buf;
}

std::string set_text(const ByteSet& s) {
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    out += byte_text(static_cast<uint8_t>(b));
    if (e > b) out += "-" + byte_text(static_cast<uint8_t>(e));
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rule_alts_.size(); ++r) {
    out += names_[r] + "#" + std::to_string(r) + " ::=";
    for (size_t a = 0; a < rule_alts_[r].size(); ++a) {
      if (a > 0) out += " |";
      for (uint32_t p = rule_alts_[r][a]; elements_[p].kind != kEnd; ++p) {
        const Element& e = elements_[p];
        out += " " + (e.kind == kRule ? names_[e.arg] + "#" + std::to_string(e.arg)
                                      : set_text(sets_[e.arg]));
      }
    }
    out += "\n";
  }
  return out;
}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : num_tokens_(token_bytes.size()) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < token_bytes.size(); ++i) {
    if (!token_bytes[i].empty()) ids.push_back(static_cast<int32_t>(i));
  }
  // Byte order (unsigned): std::string compares chars as unsigned via char_traits.
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return token_bytes[a] < token_bytes[b]; });
  // Nodes are created in preorder, so each node's children come in increasing byte order.
  std::vector<uint32_t> parent{0};
  std::vector<uint8_t> byte{0};
  nodes_.push_back({0, 0, 0, 0, 0});
  std::vector<uint32_t> path{0};
  std::string_view prev;
  for (int32_t id : ids) {
    std::string_view s = token_bytes[id];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    path.resize(common + 1);
    for (size_t j = common; j < s.size(); ++j) {
      parent.push_back(path.back());
      byte.push_back(static_cast<uint8_t>(s[j]));
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      // Every token below a node comes after its creation: its subtree's run starts here.
      const auto first = static_cast<uint32_t>(token_ids_.size());
      nodes_.push_back({0, 0, first, 0, first});
    }
    ++nodes_[path.back()].num_tokens;
    token_ids_.push_back(id);
    prev = s;
  }
  // Subtree runs and bytes, children (later in preorder) before parents.
  subtree_bytes_.assign(nodes_.size(), ByteSet());
  for (Node& n : nodes_) n.subtree_end = n.first_token + n.num_tokens;
  for (size_t c = nodes_.size(); c-- > 1;) {
    Node& p = nodes_[parent[c]];
    p.subtree_end = std::max(p.subtree_end, nodes_[c].subtree_end);
    subtree_bytes_[parent[c]].add(subtree_bytes_[c]).add(byte[c]);
  }
  // Edges grouped by parent (compressed rows).
  for (size_t c = 1; c < nodes_.size(); ++c) ++nodes_[parent[c]].num_edges;
  uint32_t offset = 0;
  for (Node& n : nodes_) {
    n.first_edge = offset;
    offset += n.num_edges;
  }
  edges_.resize(offset);
  std::vector<uint32_t> fill(nodes_.size(), 0);
  for (size_t c = 1; c < nodes_.size(); ++c) {
    const Node& p = nodes_[parent[c]];
    edges_[p.first_edge + fill[parent[c]]++] = {byte[c], static_cast<uint32_t>(c)};
  }
}

}  // namespace unillm::infer
