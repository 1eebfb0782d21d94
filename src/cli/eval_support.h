// What `eval bleu|rouge|similarity` and do_predict's scoring share: where jieba's assets are, and
// floats written as Python's json writes them.
#pragma once

#include <string>

namespace unillm::cli {

// The jieba assets (assets/jieba): flag when given, else $UNILLM_ASSETS/jieba, else beside the
// binary (build tree: <build>/../assets; install: <prefix>/share/unillm/assets), else the source
// tree. ConfigError listing the places tried.
std::string jieba_dir(const std::string& flag);
// A float as Python's json.dumps writes it (repr: shortest round-trip, "0.0" not "0").
std::string py_float(double x);

}  // namespace unillm::cli
