"""The harness: real processes and real faults for the lab, ``leaselab chaos``, the tests and the
benchmarks, and never what a queue user's own worker needs.

- ``fleet``: worker processes to spawn, pause (SIGSTOP), kill (SIGKILL), stop and cut off;
- ``proxy``: a TCP proxy between one worker and its server that can cut, slow or drop a reply;
- ``pgserver`` and ``pgwatchdog``: a throw-away PostgreSQL server that nothing outlives;
- ``powercut``: a disk that forgets what SQLite never synced (needs APSW);
- ``skew``: a worker process whose own clock is wrong;
- ``demo``: handlers that do what their payload says (sleep, fail, crash, write an effect);
- ``effects``: a ledger in a SQLite file, the outside effect the lessons and the proof pay into;
- ``gates``: a crash or a freeze put into a handler at the instant that matters.
"""
