// The CLI entry: parses sub-commands and converts library errors into one line + exit code.
#pragma once

namespace unillm::cli {

int run(int argc, char** argv);

}  // namespace unillm::cli
