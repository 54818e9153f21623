// The error the tuning database throws when its file cannot be used.
#pragma once

#include "core/error.h"

namespace attune::tuning_db {

// A database that cannot be used: corrupt or not a database, a schema newer
// than this attune, locked by another process beyond the busy timeout, used
// from a forked child, or an SQLite failure. The message names the path,
// what was found and what was expected. Bad records from the caller are
// attune::InvalidArgument instead.
class DbError : public Error {
 public:
  using Error::Error;
};

}  // namespace attune::tuning_db
