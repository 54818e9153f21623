// `attune db import` JSON (tuner/exchange.h) on arbitrary text. Invariants:
// an import either adds measurements or is refused with a message; what was
// imported exports and imports into a fresh database with the same count,
// and importing it again adds nothing.
#include <sstream>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_support.h"
#include "tuner/exchange.h"

using namespace attune;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path first_path = fuzz::scratch_directory() / "import.db";
  const std::filesystem::path second_path = fuzz::scratch_directory() / "again.db";
  std::filesystem::remove(first_path);
  std::filesystem::remove(second_path);
  std::size_t added = 0;
  tuning_db::TuningDb first = tuning_db::TuningDb::open(first_path);
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    added = tuner::import_json(first, in);
  } catch (const InvalidArgument&) {
    return 0;
  }
  if (added == 0) return 0;
  std::ostringstream exported;
  tuner::export_json(first, exported);
  tuning_db::TuningDb second = tuning_db::TuningDb::open(second_path);
  std::istringstream again(exported.str());
  fuzz::check(tuner::import_json(second, again) == added, "export then import changed the count");
  std::istringstream twice(exported.str());
  fuzz::check(tuner::import_json(second, twice) == 0, "a second import added measurements");
  return 0;
}
