// Declarations of each CPU kernel family's register function.
#pragma once

namespace unillm::cpu {
}  // namespace unillm::cpu
