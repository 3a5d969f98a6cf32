// One run, one folder: a lock that rank 0 holds on <run_dir>/run.lock for the job's life, and
// a check that a folder holding an earlier run's results is only reused on purpose.
//
// The lock is an fcntl record lock on the whole file, taken with F_OFD_SETLK (owned by the open
// file description, so no other open/close of the file in this process drops it; F_SETLK where
// the kernel lacks OFD locks). The kernel releases it when the process dies, SIGKILL included,
// so there are no stale locks to clean up. The file records the holder -- host, pid, start
// time, command, and a heartbeat rewritten every `heartbeat` -- for the message a second job
// gets, and as a second line of defence (below). The file is never deleted: deleting it would
// let a new job lock a fresh inode while an old one still holds the unlinked one.
//
// Order in the trainer: rank 0 takes the lock, then calls check_run_dir_start under it (two
// jobs cannot both pass the check), then writes metrics, checkpoints, summary.json.
//
// Shared storage (several hosts, one run folder). fcntl locks, unlike flock on some systems, go
// to the file server where the filesystem supports it; the guarantee across hosts holds on:
//  - NFSv4: locks are held by the server; a holder whose host dies is released after the
//    server's lease time (typically 90 s), not at once.
//  - NFSv3 with lockd/statd (NLM); NOT with the `nolock` or `local_lock=posix|all` mount options,
//    where locks are local to each client.
//  - Lustre mounted with `-o flock` (not `localflock`, which is per client), CephFS, GPFS /
//    Spectrum Scale, BeeGFS with global file locks enabled.
// (Linux's NFS client emulates flock() with these same POSIX locks, so flock would be no
// better there, and on Lustre/`localflock` or CIFS flock is local only.) Where locks are local
// to each host, the heartbeat still refuses a second job on another host while the first one
// lives: a record from another host with a heartbeat younger than `stale_after` is treated as
// held. What remains unguarded there: two jobs on different hosts starting within one heartbeat
// of each other, and host clocks further apart than stale_after - heartbeat.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::io {

struct LockHolder {
  std::string host;
  int64_t pid = 0;
  std::string started;        // ISO-8601 UTC
  int64_t started_unix = 0;
  int64_t heartbeat_unix = 0;  // last time the holder rewrote the record
  std::string command;        // its argv, space-separated (truncated)
  std::string describe() const;  // "host vm, pid 123, started 2025-01-01T12:00:00Z (zeroshard train ...)"
};

struct RunLockOptions {
  std::chrono::milliseconds heartbeat{std::chrono::seconds(10)};
  std::chrono::milliseconds stale_after{std::chrono::seconds(60)};
  std::string hostname;  // empty: gethostname() (tests set another to play a second host)
};

class RunLock {
 public:
  // Creates run_dir if needed and locks <run_dir>/run.lock. Throws std::runtime_error naming
  // the holder (and the lock file) when another job has it, or naming the file and errno
  // when it cannot be created or locked at all.
  static std::unique_ptr<RunLock> acquire(const std::string& run_dir, const RunLockOptions& options = {});
  ~RunLock();  // stops the heartbeat and closes the file, which releases the lock
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }
  const LockHolder& holder() const { return holder_; }  // as written at acquisition

 private:
  RunLock() = default;
  void write_record(int64_t heartbeat_unix);  // 0: released
  struct Heartbeat;
  std::string path_;
  int fd_ = -1;
  bool held_ = false;  // our record is written: the destructor marks it released
  size_t record_size_ = 0;
  LockHolder holder_;
  std::unique_ptr<Heartbeat> heartbeat_;
};

// The record in <run_dir>/run.lock, if the file exists and holds one (whether or not it is
// still locked).
std::optional<LockHolder> read_lock_record(const std::string& run_dir);

// When some process holds <run_dir>/run.lock now (another job, or this process through its own
// RunLock), its record (a placeholder naming the lock file if the record is unreadable);
// nullopt when the file is absent or nobody holds it. Takes no lock.
std::optional<LockHolder> current_lock_holder(const std::string& run_dir);

// What an earlier run left in a folder. Only non-empty results count: an empty metrics.jsonl
// (a run that failed before its first step) or an empty checkpoints/ is no result.
struct RunDirState {
  bool exists = false;
  int64_t metrics_lines = 0;             // lines in metrics.jsonl
  std::vector<std::string> checkpoints;  // entries of checkpoints/ (step_<N>, latest), sorted
  bool summary = false;                  // summary.json: the run finished
  bool has_results() const { return metrics_lines > 0 || !checkpoints.empty() || summary; }
  std::string describe() const;  // "a finished run (summary.json, 60 metrics lines, checkpoints step_60)"
};
RunDirState inspect_run_dir(const std::string& run_dir);

// Starting a run in run_dir: fine when it holds no results, when resuming, or with
// overwrite. Otherwise throws std::invalid_argument saying what the folder holds and the two
// ways on: `--resume DIR` or `--set run.overwrite=true` (or another run.dir).
void check_run_dir_start(const std::string& run_dir, bool resuming, bool overwrite);

// For run.overwrite=true: removes what a zeroshard run writes in run_dir (metrics.jsonl,
// summary.json, config.json, checkpoints/, rank<N>.log, events.out.tfevents.*, init.safetensors,
// batches.rank<N>.bin, final_shard.rank<N>.bin) and nothing else; keeps run.lock. Returns
// the names removed.
std::vector<std::string> clear_run_results(const std::string& run_dir);

}  // namespace zeroshard::io
