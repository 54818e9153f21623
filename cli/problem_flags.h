// Flag parsing shared by the commands that describe a problem.
#pragma once

#include <optional>
#include <string>

#include "core/problem.h"
#include "tuning_db/tuning_db.h"

namespace attune::cli {

// Throws InvalidArgument "FLAG: got 'SEEN'; expected EXPECTED".
[[noreturn]] void bad_flag(const std::string& flag, const std::string& seen, const std::string& expected);

DType parse_dtype_flag(const std::string& text);

// --causal (bottom-right | top-left | empty) and --window (LEFT,RIGHT |
// empty) together make one mask of the contract: a window is bottom-right
// aligned, bottom-right causal caps its right side at 0, and a window with
// top-left causal is rejected.
Mask parse_mask(const std::string& causal, const std::string& window);

// --modifiers (none, or softcap, sinks, alibi, dropout joined by '+') and
// --softcap (c; 30 when softcap is named without it) as the modifiers of a
// problem described by flags alone (explain): a sweep's problem of that set
// (tuner::sweep_modifiers: ALiBi slopes per query head, dropout p 0.1).
ScoreModifiers parse_modifiers(const std::string& names, std::optional<double> softcap);

// The tuning database named by a --db flag (created if missing), or, with
// no flag, the default one if it exists: looking never creates a database.
std::optional<tuning_db::TuningDb> open_db_for_dispatch(const std::string& flag);

}  // namespace attune::cli
