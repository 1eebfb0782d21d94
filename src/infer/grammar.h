// Context-free grammars over bytes and their matcher, for constrained sampling (structured
// output). Bytes, not code points: a byte-level BPE token may end in the middle of a UTF-8
// character, so the grammar spells UTF-8 out byte by byte.
//
// A grammar is rules; a rule is alternatives; an alternative is a sequence of byte sets and rule
// references. No left recursion (checked when built). The matcher keeps the set of parse stacks
// that fit the bytes accepted so far (as llama.cpp's GBNF matcher does), deduplicated, so an
// ambiguous grammar cannot make it blow up; allowed_tokens() walks a trie of the vocabulary with
// that state and prunes every subtree whose prefix no stack accepts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace unillm::infer {

// A set of bytes: one terminal of a grammar.
class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet of(uint8_t b) { return ByteSet().add(b); }
  static ByteSet range(uint8_t lo, uint8_t hi) { return ByteSet().add(lo, hi); }
  // The bytes of a bracket-less class spec: "0-9a-fA-F", "\"\\/bfnrt" (a '-' between two bytes is
  // a range; a leading or trailing '-' is itself).
  static ByteSet chars(std::string_view spec);
  ByteSet& add(uint8_t b) {
    w_[b >> 6] |= uint64_t{1} << (b & 63);
    return *this;
  }
  ByteSet& add(uint8_t lo, uint8_t hi);
  ByteSet& add(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w_[i] |= o.w_[i];
    return *this;
  }
  ByteSet& remove(uint8_t b) {
    w_[b >> 6] &= ~(uint64_t{1} << (b & 63));
    return *this;
  }
  ByteSet complement() const;
  bool has(uint8_t b) const { return (w_[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (w_[0] | w_[1] | w_[2] | w_[3]) == 0; }
  bool includes(const ByteSet& o) const {
    return ((o.w_[0] & ~w_[0]) | (o.w_[1] & ~w_[1]) | (o.w_[2] & ~w_[2]) | (o.w_[3] & ~w_[3])) == 0;
  }
  bool operator==(const ByteSet& o) const { return w_ == o.w_; }

 private:
  std::array<uint64_t, 4> w_{};
};

// The vocabulary for writing rules, in its own namespace to keep short names (ref, seq) out of
// infer's; files that build grammars take them with using-declarations.
namespace bnf {

// One symbol of an alternative: a byte set, or a reference to a rule when rule >= 0.
struct Symbol {
  ByteSet bytes;
  int32_t rule = -1;
};
using Symbols = std::vector<Symbol>;

inline Symbol ref(int32_t rule) { return Symbol{ByteSet(), rule}; }
inline Symbol bytes(ByteSet set) { return Symbol{set, -1}; }
// A literal: one single-byte set per byte.
Symbols lit(std::string_view text);

// Concatenation of symbols, sequences and literals: seq("{", ref(ws), members, "}").
inline void append(Symbols& out, const Symbol& s) { out.push_back(s); }
inline void append(Symbols& out, const Symbols& s) { out.insert(out.end(), s.begin(), s.end()); }
inline void append(Symbols& out, std::string_view text) { append(out, lit(text)); }
template <typename... Parts>
Symbols seq(const Parts&... parts) {
  Symbols out;
  (append(out, parts), ...);
  return out;
}

}  // namespace bnf

// Immutable compiled grammar. Layout, read by GrammarMatcher: all alternatives are runs in one
// flat element array, each run ended by a kEnd element; a rule lists the offsets of its runs.
class Grammar {
 public:
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  struct Element {
    Kind kind;
    uint32_t arg;  // kBytes: index of the byte set; kRule: the rule
  };

  uint32_t root() const { return root_; }
  size_t num_rules() const { return rule_alts_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rule_alts_[rule]; }
  const ByteSet& byte_set(uint32_t i) const { return sets_[i]; }
  // Bytes no byte set of the grammar tells apart share a class: the matcher's transitions
  // depend on the class only.
  uint32_t byte_class(uint8_t b) const { return class_of_[b]; }
  uint32_t num_byte_classes() const { return num_classes_; }
  // GBNF-like listing, for debugging and error messages.
  std::string to_string() const;

 private:
  friend class GrammarBuilder;
  uint32_t root_ = 0;
  std::vector<std::string> names_;
  std::vector<Element> elements_;
  std::vector<std::vector<uint32_t>> rule_alts_;
  std::vector<ByteSet> sets_;
  std::array<uint32_t, 256> class_of_{};
  uint32_t num_classes_ = 1;
};

// Builds a Grammar. Rules may be declared first and defined later, so they can refer to each
// other (recursion). Names are for messages only and need not be unique.
class GrammarBuilder {
 public:
  int32_t declare(std::string name);
  // Once per rule, with at least one alternative.
  void define(int32_t rule, std::vector<bnf::Symbols> alternatives);
  int32_t add(std::string name, std::vector<bnf::Symbols> alternatives);  // declare + define
  size_t num_rules() const { return rules_.size(); }
  // A rule matching min..max repetitions of item (max < 0: unbounded). item must not match "".
  // A bounded max costs max - min rules.
  int32_t repeat(const std::string& name, const bnf::Symbols& item, int min, int max);
  // The rules of one left-recursive cycle (a rule that can reach itself without consuming a
  // byte) as "a -> b -> a" names, or "" when there is none.
  std::string left_recursion() const;
  // Throws ConfigError for an undefined rule or left recursion.
  std::shared_ptr<const Grammar> build(int32_t root) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<bnf::Symbols>> rules_;
  std::vector<bool> defined_;
};

// The vocabulary's byte strings in a trie, built once per tokenizer. Tokens with empty bytes
// (special/control tokens) are not in it and are never allowed; several ids may share bytes.
class TokenTrie {
 public:
  explicit TokenTrie(const std::vector<std::string>& token_bytes);
  size_t size() const { return num_tokens_; }  // the vocabulary size (token_bytes.size())
  size_t num_nodes() const { return nodes_.size(); }

 private:
  friend class GrammarMatcher;
  struct Node {
    uint32_t first_edge, num_edges;    // edges_[first_edge ..]: children by increasing byte
    uint32_t first_token, num_tokens;  // token_ids_[first_token ..]: tokens ending here
    uint32_t subtree_end;              // token_ids_[first_token, subtree_end): all below
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  size_t num_tokens_ = 0;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty prefix)
  std::vector<Edge> edges_;
  std::vector<int32_t> token_ids_;      // in byte order, so each subtree's tokens are one run
  std::vector<ByteSet> subtree_bytes_;  // per node: every byte below it
};

// Matching state over one grammar: the parse stacks that fit the bytes accepted so far. Cheap to
// copy (a compact node list). Not thread-safe for concurrent mutation; const methods may run
// concurrently.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);
  // True and advanced when every byte is accepted in turn; false and the state unchanged
  // otherwise. Empty bytes: true.
  bool accept(std::string_view bytes);
  // The bytes accepted so far form a whole sentence of the grammar.
  bool complete() const { return complete_; }
  // Some byte may still follow.
  bool can_continue() const { return !leaves_.empty(); }
  // allowed[i] = 1 when token i's (non-empty) bytes can be accepted from the current state, else
  // 0; resized to trie.size(). Walks the trie once, over a DFA whose transitions are computed
  // once per call for each (stack set, byte class) it meets; a subtree whose bytes all lead
  // back to the same stack set (text inside a JSON string) is allowed whole.
  void allowed_tokens(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
  void reset();  // back to the start state
  const Grammar& grammar() const { return *g_; }

  // A stack is a chain of nodes from its top to the bottom; node 0 is the empty stack. pos is the
  // element the stack continues with (a byte set at a top, a rule reference below).
  struct Node {
    uint32_t pos;
    uint32_t parent;
  };

 private:
  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;       // parents before children
  std::vector<uint32_t> leaves_;  // the tops: sorted, unique nodes whose pos is a byte set
  bool complete_ = false;
};

}  // namespace unillm::infer
