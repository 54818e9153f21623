// A thin C++ layer over the SQLite C API, internal to tuning_db/: one
// connection with a cache of prepared statements, statements that reset
// themselves when they go out of scope, and IMMEDIATE transactions that roll
// back unless committed. Every failure is a DbError naming the file.
//
// Example:
//   sqlite::Connection conn(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
//   sqlite::Transaction tx(conn);
//   sqlite::Statement insert(conn, "INSERT INTO templates(kernel, hash) VALUES (?1, ?2)");
//   insert.bind(kernel, hash).run();
//   tx.commit();
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace attune::tuning_db::sqlite {

// How long a connection waits for another process's lock before failing.
inline constexpr int kBusyTimeoutMs = 10'000;

// "file:" URI of `path` (made absolute, percent-encoded) with an optional
// query such as "mode=ro". Connections always open URIs, so no file name is
// ever mistaken for one.
std::string file_uri(const std::filesystem::path& path, std::string_view query = {});

class Connection {
 public:
  // `flags`: SQLITE_OPEN_* (URI and no-mutex are added: callers serialize).
  Connection(std::filesystem::path path, int flags);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs SQL text that binds no values: DDL and pragmas.
  void exec(const char* sql);

  // exec, retried while another connection holds a lock, up to the busy
  // timeout: for the statements SQLite's busy handler does not cover, such
  // as switching the journal mode while another process creates the file.
  void exec_waiting(const char* sql);

  // Throws DbError: the path, `what` was being done, and what SQLite found.
  [[noreturn]] void fail(int rc, std::string_view what) const;

  // In a forked child the handle belongs to the parent: forget it without
  // closing, since closing could checkpoint or unlock the parent's files.
  void abandon();

  const std::filesystem::path& path() const { return path_; }
  std::int64_t changes() const;
  std::int64_t last_insert_rowid() const;
  bool in_transaction() const;

 private:
  friend class Statement;
  friend class Transaction;
  struct Cached {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  Cached& cached(std::string_view sql);

  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
  std::unordered_map<std::string, Cached, Hash, std::equal_to<>> cache_;
};

// A cached prepared statement, borrowed for one use: bind, step, read
// columns; reset and unbound again on destruction.
class Statement {
 public:
  Statement(Connection& conn, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binds the arguments to ?1, ?2, ... in order. std::nullopt and empty
  // optionals bind NULL; bools bind 0 or 1.
  template <typename... Args>
  Statement& bind(const Args&... args) {
    int index = 0;
    (bind_one(++index, args), ...);
    return *this;
  }

  bool step();  // true while a row is available
  void run();   // steps until done, ignoring rows

  bool is_null(int column) const;
  std::int64_t int64(int column) const;
  int int32(int column) const;
  double real(int column) const;
  std::string text(int column) const;
  std::optional<double> optional_real(int column) const;
  std::optional<std::string> optional_text(int column) const;

 private:
  template <typename T>
  struct IsOptional : std::false_type {};
  template <typename T>
  struct IsOptional<std::optional<T>> : std::true_type {};

  template <typename T>
  void bind_one(int index, const T& value) {
    if constexpr (std::is_same_v<T, std::nullopt_t>) {
      bind_null(index);
    } else if constexpr (IsOptional<T>::value) {
      if (value) {
        bind_one(index, *value);
      } else {
        bind_null(index);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      bind_int64(index, value ? 1 : 0);
    } else if constexpr (std::is_integral_v<T>) {
      bind_int64(index, static_cast<std::int64_t>(value));
    } else if constexpr (std::is_floating_point_v<T>) {
      bind_real(index, static_cast<double>(value));
    } else {
      bind_text(index, std::string_view(value));
    }
  }
  void bind_null(int index);
  void bind_int64(int index, std::int64_t value);
  void bind_real(int index, double value);
  void bind_text(int index, std::string_view value);
  void check_bind(int rc, int index);
  std::string sql() const;

  Connection& conn_;
  Connection::Cached& cached_;
};

// BEGIN IMMEDIATE: takes the write lock up front (waiting up to the busy
// timeout), so a transaction never fails half-way for want of the lock.
// Rolls back on destruction unless commit() was called.
class Transaction {
 public:
  // Immediate: takes the write lock at once (every write). Read: a deferred
  // transaction that only reads, so several statements see one snapshot.
  enum class Kind { kImmediate, kRead };
  explicit Transaction(Connection& conn, Kind kind = Kind::kImmediate);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Connection& conn_;
  bool done_ = false;
};

}  // namespace attune::tuning_db::sqlite
