// DataError: a problem in the user's training data (a bad JSON line, a missing column, an empty
// file). Messages name the file and line: "[data] train.jsonl line 17: key 'text' missing".
#pragma once

#include "core/error.h"

namespace unillm::data {

class DataError : public unillm::Error {
  using Error::Error;
};

}  // namespace unillm::data
