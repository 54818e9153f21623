// Measurements in and out of the tuning database as CSV or JSON, for
// spreadsheets, plots and exchange between machines (`attune db export`,
// `attune db import`). For database-to-database transfer use merge, which
// also carries device details and compile results.
#pragma once

#include <iosfwd>

#include "tuning_db/tuning_db.h"

namespace attune::tuner {

// One row per measurement with its device, problem (key, its score
// modifiers as modifier_names spells them, and exact sizes), kernel,
// template hash, variant and results.
void export_csv(const tuning_db::TuningDb& db, std::ostream& out);
void export_json(const tuning_db::TuningDb& db, std::ostream& out);

// Reads what export_json wrote and records every measurement not already in
// `db` (the best rows follow); an entry without "modifiers" (an export from
// before score modifiers) has none. Returns how many were added. Throws
// InvalidArgument naming the entry that is malformed.
std::size_t import_json(tuning_db::TuningDb& db, std::istream& in);

}  // namespace attune::tuner
