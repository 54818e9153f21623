#include "tuning_db/sqlite.h"

#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "tuning_db/error.h"

namespace attune::tuning_db::sqlite {

std::string file_uri(const std::filesystem::path& path, std::string_view query) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string uri = "file:";
  for (const char c : std::filesystem::absolute(path).string()) {
    const auto byte = static_cast<unsigned char>(c);
    const bool plain = (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || (byte >= '0' && byte <= '9') ||
                       c == '/' || c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      uri += c;
    } else {
      uri += '%';
      uri += kHex[byte >> 4];
      uri += kHex[byte & 0xF];
    }
  }
  if (!query.empty()) {
    uri += '?';
    uri += query;
  }
  return uri;
}

namespace {

// Why the file system refuses the database, when it can tell: a directory
// that cannot be written (read-only, no permission) or a full disk. SQLite's
// own words ("unable to open database file") name neither.
std::string storage_problem(const std::filesystem::path& path) {
  const std::filesystem::path absolute = std::filesystem::absolute(path);
  const std::filesystem::path directory = absolute.parent_path();
  if (::access(directory.c_str(), W_OK) != 0) {
    return "; the directory " + directory.string() + " cannot be written (" + std::strerror(errno) +
           "): expected a writable directory (the database keeps its -wal and -shm files beside it)";
  }
  if (::access(absolute.c_str(), F_OK) == 0 && ::access(absolute.c_str(), W_OK) != 0) {
    return "; the file cannot be written (" + std::string(std::strerror(errno)) + "): expected a writable file";
  }
  struct statvfs fs {};
  if (::statvfs(directory.c_str(), &fs) == 0 && fs.f_bavail == 0) {
    return "; the file system of " + directory.string() + " is full: expected free space";
  }
  return "";
}

}  // namespace

Connection::Connection(std::filesystem::path path, int flags) : path_(std::move(path)) {
  const std::string uri = file_uri(path_);
  const int rc = sqlite3_open_v2(uri.c_str(), &db_, flags | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    // The handle exists even when opening failed; keep it for the message.
    try {
      fail(rc, "opening");
    } catch (...) {
      sqlite3_close_v2(db_);
      db_ = nullptr;
      throw;
    }
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
}

Connection::~Connection() {
  if (db_ == nullptr) return;
  for (auto& [sql, cached] : cache_) sqlite3_finalize(cached.stmt);
  sqlite3_close_v2(db_);
}

void Connection::abandon() {
  db_ = nullptr;
  // The statements are the parent's too; drop the pointers unfinalized.
  for (auto& [sql, cached] : cache_) cached.stmt = nullptr;
}

void Connection::exec(const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) fail(rc, std::string("running \"") + sql + "\"");
}

void Connection::exec_waiting(const char* sql) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    const bool locked = (rc & 0xFF) == SQLITE_BUSY || (rc & 0xFF) == SQLITE_LOCKED;
    if (!locked || std::chrono::steady_clock::now() >= deadline) fail(rc, std::string("running \"") + sql + "\"");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Connection::fail(int rc, std::string_view what) const {
  std::string message = "tuning database " + path_.string() + ": " + std::string(what) + " failed: ";
  const std::string sqlite_says = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  switch (rc & 0xFF) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      message += "still locked by another connection after waiting " + std::to_string(kBusyTimeoutMs / 1000) +
                 " s (SQLite: " + sqlite_says + "); expected the lock to be released within that time";
      break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      message += "the file is corrupt or not an SQLite database (SQLite: " + sqlite_says +
                 "); expected an attune tuning database. The file was left untouched: move it aside or restore "
                 "a backup";
      break;
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_FULL:
    case SQLITE_IOERR:
      message += sqlite_says + " (" + sqlite3_errstr(rc) + ")";
      // The system's reason (No space left on device, File too large, Read-only file system).
      if (const int error = db_ != nullptr ? sqlite3_system_errno(db_) : 0; error != 0) {
        message += std::string(": ") + std::strerror(error);
      }
      message += storage_problem(path_);
      break;
    default:
      message += sqlite_says + " (" + sqlite3_errstr(rc) + ")";
      break;
  }
  throw DbError(message);
}

// sqlite3_changes, not changes64 (3.37): keeps SQLite 3.25 (window functions) the minimum.
std::int64_t Connection::changes() const { return sqlite3_changes(db_); }
std::int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
bool Connection::in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

Connection::Cached& Connection::cached(std::string_view sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    // Persistent: these statements live as long as the connection.
    const int rc =
        sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) fail(rc, "preparing \"" + std::string(sql) + "\"");
    it = cache_.emplace(std::string(sql), Cached{.stmt = stmt}).first;
  }
  return it->second;
}

Statement::Statement(Connection& conn, std::string_view sql) : conn_(conn), cached_(conn.cached(sql)) {
  // A statement cannot be stepped by two users at once; the callers never
  // nest the same query, so this is a bug, not a runtime condition.
  if (cached_.in_use) throw DbError("tuning database: statement already in use: " + std::string(sql));
  cached_.in_use = true;
}

Statement::~Statement() {
  sqlite3_reset(cached_.stmt);
  sqlite3_clear_bindings(cached_.stmt);
  cached_.in_use = false;
}

void Statement::check_bind(int rc, int index) {
  if (rc != SQLITE_OK) conn_.fail(rc, "binding parameter " + std::to_string(index) + " of \"" + sql() + "\"");
}

std::string Statement::sql() const { return sqlite3_sql(cached_.stmt); }

void Statement::bind_null(int index) { check_bind(sqlite3_bind_null(cached_.stmt, index), index); }
void Statement::bind_int64(int index, std::int64_t value) {
  check_bind(sqlite3_bind_int64(cached_.stmt, index, value), index);
}
void Statement::bind_real(int index, double value) {
  check_bind(sqlite3_bind_double(cached_.stmt, index, value), index);
}
void Statement::bind_text(int index, std::string_view value) {
  // SQLITE_TRANSIENT: SQLite copies the text, so temporaries are safe to bind.
  check_bind(sqlite3_bind_text64(cached_.stmt, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
             index);
}

bool Statement::step() {
  const int rc = sqlite3_step(cached_.stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  conn_.fail(rc, "running \"" + sql() + "\"");
}

void Statement::run() {
  while (step()) {
  }
}

bool Statement::is_null(int column) const { return sqlite3_column_type(cached_.stmt, column) == SQLITE_NULL; }
std::int64_t Statement::int64(int column) const { return sqlite3_column_int64(cached_.stmt, column); }
int Statement::int32(int column) const { return sqlite3_column_int(cached_.stmt, column); }
double Statement::real(int column) const { return sqlite3_column_double(cached_.stmt, column); }

std::string Statement::text(int column) const {
  const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(cached_.stmt, column));
  const int size = sqlite3_column_bytes(cached_.stmt, column);
  return data == nullptr ? std::string() : std::string(data, static_cast<std::size_t>(size));
}

std::optional<double> Statement::optional_real(int column) const {
  if (is_null(column)) return std::nullopt;
  return real(column);
}

std::optional<std::string> Statement::optional_text(int column) const {
  if (is_null(column)) return std::nullopt;
  return text(column);
}

Transaction::Transaction(Connection& conn, Kind kind) : conn_(conn) {
  conn_.exec(kind == Kind::kImmediate ? "BEGIN IMMEDIATE" : "BEGIN");
}

Transaction::~Transaction() {
  // An I/O error or a full disk may already have rolled SQLite back.
  if (!done_ && conn_.in_transaction()) sqlite3_exec(conn_.db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  conn_.exec("COMMIT");
  done_ = true;
}

}  // namespace attune::tuning_db::sqlite
