"""The frame stream's wire format: one msgpack map per frame, appended to a file.

Frames are primitive and compact: integer nanosecond timestamps and interned code
frames and stacks. A ``spans`` frame carries the definitions of any frame or stack id
it uses for the first time, so the stream decodes in one forward pass and a file cut
short at any frame boundary is still a valid recording.

Frame kinds (key ``k``)::

    hello    {v, t, agent, backend, backend_version, rate_hz, max_rate_hz, window_s, host, argv}
             rate_hz: every process's first sampling rate; max_rate_hz: the most a ``rate``
             frame may raise it to (equal: the rate is fixed; absent in older recordings)
    target   {t, pid, exe, cmd, nspid, started, mem_limit, rank, local_rank, world_size, group_rank}
             nspid: the target's PID in each PID namespace (NVML reports the host's); started:
             when the process started (wall-clock ns), its age is the memory warm-up's clock;
             mem_limit: its cgroup's memory limit in bytes (both None when unknown or unset,
             absent in older recordings)
    spans    {pid, w, fdefs: [[id, name, file, line, src, ctx]], sdefs: [[id, [fid...]]],
              spans: [[tid, ts_ns, dur_ns, sid]]}
             a span is a stack observed continuously for dur_ns; stacks list frames
             outermost first; ``src`` is the source line, ``ctx`` the enclosing
             ``with`` items of that line (for ``no_grad``), both None when unreadable
    window   {pid, w, start, end, samples, errors, threads, thread_ns}
             one py-spy recording window; samples: py-spy's count, one per thread read at each
             sample; threads: the threads its trace holds; thread_ns: the time each of them was
             seen, summed (both absent before they were added)
    rate     {t, pid, rate_hz, why}
             the sampler changed the process's rate (agent/rate.py): its spans from t on were
             sampled at rate_hz, those before at its previous rate; written before them. why:
             the analysis's advice it followed, in words
    threads  {pid, t, threads: [[tid, os_tid, name, active]]}
             name: the Python name py-spy read, the last one read for that thread, or
             "MainThread" for the main thread of a CPython that never imported threading
             (agent.threads.ThreadNames); None when it cannot be known
    proc     {pid, t, cpu, rss, nthreads, children: [[pid, cpu, rss]]}
    tcpu     {pid, tid, samples: [[ts_ns, on_cpu_ns, runqueue_ns]]}   main thread, cumulative
    scpu     {pid, samples: [[ts_ns, on_cpu_ns, runqueue_ns]]}   the py-spy recorders sampling pid,
             all their threads, cumulative (at a hand-over, the larger increment of the two), read
             with tcpu: a recorder that waited for a core took no sample meanwhile (absent before)
    mem      {pid, samples: [[ts_ns, rss_bytes]]}   the process's RSS every ~50 ms (statm), batched
    source   {t, pid, file, text}   one of the job's own source files (not a library's), sent
             once, when a sampled frame first names it: the training loop's code, read whole
    host     {t, cpu, mem_used, mem_total, cpus}   (cpu: % of all its logical CPUs; cpus: how many)
    gpu      {t, devices: [[index, util %, mem_used, mem_total, temp C, power W, limit W, mig]],
              procs: [[device, host_pid, used bytes, SM %]]}
    pstate   {t, pid, stopped, why}               the process stopped (SIGSTOP, a debugger: stopped true) or
             ran again (false), seen within ~20 ms (agent/watch.py); its spans leave the stopped stretch out
    restart  {t, rank, old_pid, pid}              the launcher replaced a rank's process
    error    {t, pid, kind, msg}
    exit     {t, pid, status}
    cost     {t, pid, parts}                      the attacher's own CPU seconds by part, cumulative: a
             sampler's (pid: its target) every 10 s and at its end; the agent's process and its
             reaped py-spy children (pid null) every 10 s and at the end (agent/cost.py)
    bye      {t, reason}                          written by the session when it ends
    segment  {n, t, max_bytes, dropped, dropped_bytes, dropped_from, dropped_to}
             the first frame of a numbered segment (see below), opened at wall-clock t;
             dropped*: what rotation has deleted so far (segments, bytes, the wall-clock
             range they were opened in); written again when a later deletion changes it

A frame with ``ctx: 1`` is a copy of an earlier one, repeated as a segment's context.

How the files are written, rotated under a cap and cut back on a full disk: agent/writer.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import msgpack

WIRE_VERSION = 1

# Decoding limits: no legitimate frame comes near these; a corrupt or hostile file
# must not make the reader allocate gigabytes.
MAX_FRAME_BYTES = 32 * 1024 * 1024
MAX_STR_LEN = 1024 * 1024
MAX_ARRAY_LEN = 2_000_000
MAX_MAP_LEN = 10_000

def segment_path(base: str | os.PathLike[str], n: int) -> Path:
    """Segment ``n`` of the recording whose first segment is ``base`` (frames.msgpack ->
    frames.000001.msgpack); segment 0 is ``base`` itself."""
    base = Path(base)
    if n == 0:
        return base
    stem = base.name[: -len(".msgpack")] if base.name.endswith(".msgpack") else base.name
    return base.with_name(f"{stem}.{n:06d}.msgpack")


def unpacker(stream: BinaryIO | None = None) -> msgpack.Unpacker:
    """A msgpack Unpacker with the stream's size limits."""
    return msgpack.Unpacker(
        stream,
        raw=False,
        max_buffer_size=MAX_FRAME_BYTES,
        max_str_len=MAX_STR_LEN,
        max_bin_len=MAX_STR_LEN,
        max_array_len=MAX_ARRAY_LEN,
        max_map_len=MAX_MAP_LEN,
        max_ext_len=0,
    )
