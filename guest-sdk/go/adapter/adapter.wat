;; The WASI preview1 functions a Go program imports (GOOS=wasip1), on top of
;; the WASI 0.2 functions the host links, for a policy component.
;;
;; Go's runtime needs a clock, random bytes and somewhere to write its panic
;; messages; a policy has no files, arguments, environment or network. So:
;; - clock_time_get: wasi:clocks (monotonic and wall clock);
;; - random_get: wasi:random;
;; - fd_write to 1 and 2: wasi:cli stdout and stderr, in chunks of at most
;;   4096 bytes (the most one blocking-write-and-flush takes);
;; - proc_exit traps instead of exiting: a Go panic ends with exit(2) after
;;   printing its message, and a trap makes the host report the call's
;;   stderr (the message) with the failure;
;; - poll_oneoff (Go's sleep) returns at once; sched_yield does nothing;
;; - no arguments, no environment, no preopened directories; every file
;;   system and socket call answers ENOSYS (52) or EBADF (8).
;;
;; Two functions of its own, called by the Go SDK:
;; - nri_wasm_set_scratch(ptr): 16 bytes of the program's memory (a Go
;;   global, never moved) for the results the WASI 0.2 calls return through
;;   memory. Until it is set, the wall clock reads 0 and output is dropped.
;; - nri_wasm_clock_pause(on): while the SDK's cabi_realloc runs, Go's
;;   allocator may ask for the time (garbage collection) but a component may
;;   not call its imports from inside cabi_realloc: the monotonic clock then
;;   answers the last time it read.
;;
;; It is turned into an adapter with `wasm-tools component embed wit/
;; --world adapter` (which records the WASI interfaces it imports) and given
;; to `wasm-tools component new --adapt wasi_snapshot_preview1=...`, which
;; keeps only the functions the program imports.
(module
  (import "env" "memory" (memory 0))
  (import "wasi:clocks/monotonic-clock@0.2.0" "now" (func $monotonic_now (result i64)))
  (import "wasi:clocks/wall-clock@0.2.0" "now" (func $wall_now (param i32)))
  (import "wasi:random/random@0.2.0" "get-random-u64" (func $random_u64 (result i64)))
  (import "wasi:cli/stdout@0.2.0" "get-stdout" (func $get_stdout (result i32)))
  (import "wasi:cli/stderr@0.2.0" "get-stderr" (func $get_stderr (result i32)))
  (import "wasi:io/streams@0.2.0" "[method]output-stream.blocking-write-and-flush"
    (func $write_and_flush (param i32 i32 i32 i32)))
  (import "wasi:io/streams@0.2.0" "[resource-drop]output-stream" (func $drop_stream (param i32)))
  (import "wasi:io/error@0.2.0" "[resource-drop]error" (func $drop_error (param i32)))

  (global $scratch (mut i32) (i32.const 0))
  (global $paused (mut i32) (i32.const 0))
  (global $last_monotonic (mut i64) (i64.const 0))

  ;; errno values
  ;; 0 success, 8 EBADF, 28 EINVAL, 52 ENOSYS

  (func (export "nri_wasm_set_scratch") (param $ptr i32)
    (global.set $scratch (local.get $ptr)))

  (func (export "nri_wasm_clock_pause") (param $on i32)
    (global.set $paused (local.get $on)))

  (func (export "clock_time_get") (param $id i32) (param $precision i64) (param $out i32) (result i32)
    (local $now i64)
    ;; 1: monotonic
    (if (i32.eq (local.get $id) (i32.const 1))
      (then
        (if (i32.eqz (global.get $paused))
          (then (global.set $last_monotonic (call $monotonic_now))))
        (i64.store (local.get $out) (global.get $last_monotonic))
        (return (i32.const 0))))
    ;; 0: realtime
    (if (i32.eqz (local.get $id))
      (then
        (if (i32.eqz (global.get $scratch))
          (then
            (i64.store (local.get $out) (i64.const 0))
            (return (i32.const 0))))
        (call $wall_now (global.get $scratch))
        (i64.store (local.get $out)
          (i64.add
            (i64.mul (i64.load (global.get $scratch)) (i64.const 1000000000))
            (i64.extend_i32_u (i32.load offset=8 (global.get $scratch)))))
        (return (i32.const 0))))
    (i32.const 28))

  (func (export "clock_res_get") (param $id i32) (param $out i32) (result i32)
    (if (i32.gt_u (local.get $id) (i32.const 1)) (then (return (i32.const 28))))
    (i64.store (local.get $out) (i64.const 1))
    (i32.const 0))

  (func (export "random_get") (param $buf i32) (param $len i32) (result i32)
    (local $v i64)
    (block $done
      (loop $words
        (br_if $done (i32.lt_u (local.get $len) (i32.const 8)))
        (i64.store align=1 (local.get $buf) (call $random_u64))
        (local.set $buf (i32.add (local.get $buf) (i32.const 8)))
        (local.set $len (i32.sub (local.get $len) (i32.const 8)))
        (br $words)))
    (if (local.get $len)
      (then
        (local.set $v (call $random_u64))
        (loop $bytes
          (i64.store8 (local.get $buf) (local.get $v))
          (local.set $v (i64.shr_u (local.get $v) (i64.const 8)))
          (local.set $buf (i32.add (local.get $buf) (i32.const 1)))
          (local.set $len (i32.sub (local.get $len) (i32.const 1)))
          (br_if $bytes (local.get $len)))))
    (i32.const 0))

  ;; Writes [ptr, ptr+len) to the stream in chunks of at most 4096 bytes;
  ;; stops at the first failure.
  (func $write_all (param $stream i32) (param $ptr i32) (param $len i32)
    (local $chunk i32)
    (block $done
      (loop $chunks
        (br_if $done (i32.eqz (local.get $len)))
        (local.set $chunk
          (select (i32.const 4096) (local.get $len) (i32.gt_u (local.get $len) (i32.const 4096))))
        (call $write_and_flush (local.get $stream) (local.get $ptr) (local.get $chunk) (global.get $scratch))
        ;; result<_, stream-error>: tag at 0; stream-error tag at 4
        ;; (0: last-operation-failed with an error handle at 8; 1: closed)
        (if (i32.load8_u (global.get $scratch))
          (then
            (if (i32.eqz (i32.load8_u offset=4 (global.get $scratch)))
              (then (call $drop_error (i32.load offset=8 (global.get $scratch)))))
            (br $done)))
        (local.set $ptr (i32.add (local.get $ptr) (local.get $chunk)))
        (local.set $len (i32.sub (local.get $len) (local.get $chunk)))
        (br $chunks))))

  (func (export "fd_write") (param $fd i32) (param $iovs i32) (param $n i32) (param $nwritten i32) (result i32)
    (local $stream i32) (local $i i32) (local $total i32) (local $iov i32)
    (if (i32.and (i32.ne (local.get $fd) (i32.const 1)) (i32.ne (local.get $fd) (i32.const 2)))
      (then (return (i32.const 8))))
    (if (global.get $scratch)
      (then
        (local.set $stream
          (if (result i32) (i32.eq (local.get $fd) (i32.const 1))
            (then (call $get_stdout))
            (else (call $get_stderr))))))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $iov (i32.add (local.get $iovs) (i32.shl (local.get $i) (i32.const 3))))
        (if (global.get $scratch)
          (then
            (call $write_all (local.get $stream) (i32.load (local.get $iov)) (i32.load offset=4 (local.get $iov)))))
        (local.set $total (i32.add (local.get $total) (i32.load offset=4 (local.get $iov))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (if (global.get $scratch) (then (call $drop_stream (local.get $stream))))
    (i32.store (local.get $nwritten) (local.get $total))
    (i32.const 0))

  (func (export "proc_exit") (param $code i32)
    unreachable)

  (func (export "sched_yield") (result i32)
    (i32.const 0))

  ;; Every subscription (Go only ever sleeps) completes at once.
  (func (export "poll_oneoff") (param $in i32) (param $out i32) (param $n i32) (param $nevents i32) (result i32)
    (local $i i32) (local $sub i32) (local $ev i32)
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $sub (i32.add (local.get $in) (i32.mul (local.get $i) (i32.const 48))))
        (local.set $ev (i32.add (local.get $out) (i32.mul (local.get $i) (i32.const 32))))
        (i64.store (local.get $ev) (i64.load (local.get $sub)))
        (i32.store16 offset=8 (local.get $ev) (i32.const 0))
        (i32.store8 offset=10 (local.get $ev) (i32.load8_u offset=8 (local.get $sub)))
        (i64.store offset=16 (local.get $ev) (i64.const 0))
        (i64.store offset=24 (local.get $ev) (i64.const 0))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i32.store (local.get $nevents) (local.get $n))
    (i32.const 0))

  ;; No arguments, no environment.
  (func (export "args_sizes_get") (param $argc i32) (param $size i32) (result i32)
    (i32.store (local.get $argc) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    (i32.const 0))
  (func (export "args_get") (param i32 i32) (result i32)
    (i32.const 0))
  (func (export "environ_sizes_get") (param $count i32) (param $size i32) (result i32)
    (i32.store (local.get $count) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    (i32.const 0))
  (func (export "environ_get") (param i32 i32) (result i32)
    (i32.const 0))

  ;; Standard streams exist (a character device each); nothing else does.
  (func (export "fd_fdstat_get") (param $fd i32) (param $buf i32) (result i32)
    (if (i32.gt_u (local.get $fd) (i32.const 2)) (then (return (i32.const 8))))
    (i64.store (local.get $buf) (i64.const 2))
    (i64.store offset=8 (local.get $buf) (i64.const -1))
    (i64.store offset=16 (local.get $buf) (i64.const 0))
    (i32.const 0))
  (func (export "fd_fdstat_set_flags") (param $fd i32) (param i32) (result i32)
    (if (i32.gt_u (local.get $fd) (i32.const 2)) (then (return (i32.const 8))))
    (i32.const 0))
  (func (export "fd_close") (param $fd i32) (result i32)
    (if (i32.gt_u (local.get $fd) (i32.const 2)) (then (return (i32.const 8))))
    (i32.const 0))
  (func (export "fd_read") (param $fd i32) (param i32 i32) (param $nread i32) (result i32)
    (if (i32.gt_u (local.get $fd) (i32.const 2)) (then (return (i32.const 8))))
    (i32.store (local.get $nread) (i32.const 0))
    (i32.const 0))
  ;; No preopened directories: the first lookup ends the list.
  (func (export "fd_prestat_get") (param i32 i32) (result i32)
    (i32.const 8))
  (func (export "fd_prestat_dir_name") (param i32 i32 i32) (result i32)
    (i32.const 8))

  (func (export "fd_fdstat_set_rights") (param i32 i64 i64) (result i32) (i32.const 52))
  (func (export "fd_filestat_get") (param i32 i32) (result i32) (i32.const 52))
  (func (export "fd_filestat_set_size") (param i32 i64) (result i32) (i32.const 52))
  (func (export "fd_pread") (param i32 i32 i32 i64 i32) (result i32) (i32.const 52))
  (func (export "fd_pwrite") (param i32 i32 i32 i64 i32) (result i32) (i32.const 52))
  (func (export "fd_readdir") (param i32 i32 i32 i64 i32) (result i32) (i32.const 52))
  (func (export "fd_seek") (param i32 i64 i32 i32) (result i32) (i32.const 52))
  (func (export "fd_sync") (param i32) (result i32) (i32.const 52))
  (func (export "path_create_directory") (param i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_filestat_get") (param i32 i32 i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_filestat_set_times") (param i32 i32 i32 i32 i64 i64 i32) (result i32) (i32.const 52))
  (func (export "path_link") (param i32 i32 i32 i32 i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_open") (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32) (i32.const 52))
  (func (export "path_readlink") (param i32 i32 i32 i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_remove_directory") (param i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_rename") (param i32 i32 i32 i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_symlink") (param i32 i32 i32 i32 i32) (result i32) (i32.const 52))
  (func (export "path_unlink_file") (param i32 i32 i32) (result i32) (i32.const 52))
  (func (export "sock_accept") (param i32 i32 i32) (result i32) (i32.const 52))
  (func (export "sock_shutdown") (param i32 i32) (result i32) (i32.const 52))
)
