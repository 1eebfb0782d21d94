// SFT records as conversations: what the alpaca, sharegpt and PaddleNLP {src,tgt} readers
// produce (LLaMA-Factory's converters' output: _prompt / _response / _system) and what the
// supervised processor renders through a chat template.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/template.h"

namespace unillm::data {

struct Conversation {
  // Alternating user/assistant turns starting with user, ending with the assistant response to
  // train on (LLaMA-Factory's _prompt + _response); function/observation roles may stand in
  // for user/assistant as LLaMA-Factory's sharegpt tags allow.
  std::vector<Message> messages;
  std::string system;  // "" = the template's default system prompt
  std::string tools;   // "" or a JSON list of tool schemas (LLaMA-Factory's tools column)
  std::string source;  // "FILE line N" for messages about this record
};

struct ConversationSet {
  std::vector<Conversation> conversations;
  int64_t rows = 0;             // rows seen (what max_samples counts)
  int64_t skipped_records = 0;  // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few skip reasons
};

}  // namespace unillm::data
