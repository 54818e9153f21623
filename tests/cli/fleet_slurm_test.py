#!/usr/bin/env python3
"""tools/slurm on a real Slurm: a single-machine cluster of 4 CPU nodes
(munged, slurmctld and four slurmd, Debian's slurm-wlm and munge) started
and stopped here. An emulator sweep in 4 array shards; shard 2 is cancelled
mid-way (scancel), so the dependent merge job never runs; submit.sh again
resubmits shard 2 alone, which resumes from its database, and the merge
job's database holds exactly the (device, problem, variant) measurements of
a single-process sweep of the same space, and verifies.

Exits 77 (CTest: skipped) with the reason when Slurm cannot be started.

Usage: fleet_slurm_test.py PATH_TO_ATTUNE
"""
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

from cli_support import Checks

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUBMIT = os.path.join(SOURCE, "tools", "slurm", "submit.sh")
SWEEP = ["--backend", "emu", "--head-dims", "32", "--masks", "none,causal", "--seqlens", "64,128",
         "--batch-heads", "1x2", "--max-variants", "4", "--repetitions", "2"]
SKIP = 77


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    """munged, slurmctld and 4 slurmd under one temporary directory."""

    def __init__(self, root):
        self.root = root
        self.env = dict(os.environ, SLURM_CONF=os.path.join(root, "slurm.conf"))
        self.pids = []

    def start(self):
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo"):
            if shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool):
                skip("%s is not installed (tools/setup.sh installs slurm-wlm and munge)" % tool)
        if os.geteuid() != 0:
            skip("slurmd must run as root to start jobs (this test runs as uid %d)" % os.geteuid())
        r = self.root
        for d in ("state", "spool", "log"):
            os.makedirs(os.path.join(r, d))
        with open(os.path.join(r, "munge.key"), "wb") as f:
            f.write(os.urandom(128))
        os.chmod(os.path.join(r, "munge.key"), 0o600)
        sock = os.path.join(r, "munge.socket")
        self.run("munged", "--key-file=%s/munge.key" % r, "--socket=%s" % sock, "--pid-file=%s/munged.pid" % r,
                 "--log-file=%s/log/munged.log" % r, "--seed-file=%s/munge.seed" % r, "--force")
        host = socket.gethostname().split(".")[0]
        ctld, slurmd, *nodes = free_ports(6)
        conf = "\n".join([
            "ClusterName=attune-test",
            "SlurmctldHost=%s(127.0.0.1)" % host,
            "SlurmctldPort=%d" % ctld, "SlurmdPort=%d" % slurmd,
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", "AuthInfo=socket=%s" % sock,
            "StateSaveLocation=%s/state" % r, "SlurmdSpoolDir=%s/spool/%%n" % r,
            "SlurmctldPidFile=%s/slurmctld.pid" % r, "SlurmdPidFile=%s/slurmd-%%n.pid" % r,
            "SlurmctldLogFile=%s/log/slurmctld.log" % r, "SlurmdLogFile=%s/log/slurmd-%%n.log" % r,
            # No cgroups in a container: plain process tracking, no task plugin.
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "SchedulerType=sched/backfill",
            "ReturnToService=2", "SlurmdParameters=config_overrides", "MinJobAge=600",
            "NodeName=node[1-4] NodeHostname=%s NodeAddr=127.0.0.1 Port=%s CPUs=1 State=UNKNOWN" % (
                host, ",".join(str(p) for p in nodes)),
            "PartitionName=debug Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP", ""])
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(conf)
        self.run("slurmctld", "-f", self.env["SLURM_CONF"])
        for n in range(1, 5):
            self.run("slurmd", "-f", self.env["SLURM_CONF"], "-N", "node%d" % n)
        deadline = time.time() + 30
        while time.time() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%D %t"], env=self.env, capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.split() == ["4", "idle"]:
                return
            time.sleep(0.3)
        skip("the Slurm nodes did not come up within 30 s: %s\n%s" % (out.stdout.strip(), self.logs()))

    def run(self, *cmd):
        r = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True)
        if r.returncode != 0:
            skip("cannot start %s: %s %s\n%s" % (cmd[0], r.stdout.strip(), r.stderr.strip(), self.logs()))

    def logs(self):
        text = []
        for name in sorted(os.listdir(os.path.join(self.root, "log"))):
            with open(os.path.join(self.root, "log", name), errors="replace") as f:
                text.append("--- %s\n%s" % (name, "".join(f.readlines()[-15:])))
        return "\n".join(text)

    def stop(self):
        for pidfile in ["slurmd-node%d.pid" % n for n in range(1, 5)] + ["slurmctld.pid", "munged.pid"]:
            try:
                with open(os.path.join(self.root, pidfile)) as f:
                    os.kill(int(f.read().split()[0]), 15)
            except (OSError, ValueError, IndexError):
                pass
        time.sleep(0.5)

    def state(self, job):
        """Slurm's state of a job (array tasks: "JOB_K"), "" once it left the queue."""
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=self.env, capture_output=True, text=True)
        return out.stdout.strip()


def measurements(db):
    """The (device, problem, variant) triples of a database, by keys, not ids."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT d.key, p.op, p.dtype, p.head_dim_k, p.head_dim_v, p.mask, p.seqlen_q, p.seqlen_k, p.batch, "
        "p.heads_q, p.heads_kv, t.kernel, v.variant_id FROM measurements m JOIN devices d ON d.id = m.device "
        "JOIN problems p ON p.id = m.problem JOIN variants v ON v.id = m.variant "
        "JOIN templates t ON t.id = v.template").fetchall()
    con.close()
    return rows


def count(db):
    if not os.path.exists(db):
        return 0
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        n = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        con.close()
        return n
    except sqlite3.Error:
        return 0


def wait(predicate, seconds, step=0.1):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def main():
    attune = os.path.abspath(sys.argv[1])
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="attune_slurm_") as tmp:
        cluster = Cluster(os.path.join(tmp, "cluster"))
        os.makedirs(cluster.root)
        cluster.start()
        try:
            run_fleet(attune, tmp, cluster, checks)
        finally:
            cluster.stop()
    return checks.finish()


def run_fleet(attune, tmp, cluster, checks):
    env = dict(cluster.env, ATTUNE_NODE_CACHE=os.path.join(tmp, "node-cache"))
    single = os.path.join(tmp, "single.db")
    r = subprocess.run([attune, "tune", "--db", single, "--quiet"] + SWEEP, env=env, capture_output=True, text=True,
                       timeout=600)
    expected = measurements(single)
    checks.check(r.returncode == 0 and len(expected) > 8, "single-process sweep: %d measurements (%s)" % (
        len(expected), (r.stdout + r.stderr).strip()[-200:]))

    # Shard 2 measures slowly (its isolated workers start through a wrapper
    # that waits), so that it can be cancelled mid-way at a known point.
    slow = os.path.join(tmp, "slow_worker.sh")
    with open(slow, "w") as f:
        f.write("#!/bin/sh\n[ \"$SLURM_ARRAY_TASK_ID\" = 2 ] && [ ! -e %s/resumed ] && sleep 1\nexec %s \"$@\"\n" % (
            tmp, attune))
    os.chmod(slow, 0o755)
    fleet = os.path.join(tmp, "fleet")
    sweep = SWEEP + ["--isolate", "yes", "--time-limit", "600"]  # a loaded CI machine must not time out
    first = subprocess.run(["bash", SUBMIT, "--shards", "4", "--out", fleet, "--attune", attune, "--"] + sweep,
                           env=dict(env, ATTUNE_TUNE_WORKER=slow), capture_output=True, text=True, timeout=60)
    jobs = dict(line.split()[:2] for line in first.stdout.splitlines() if line.split()[:1] in (["array"], ["merge"]))
    if not checks.check(first.returncode == 0 and "array" in jobs and "merge" in jobs,
                        "submit.sh --shards 4: %s %s" % (first.stdout.strip(), first.stderr.strip())):
        return
    shard2 = os.path.join(fleet, "shards", "shard-2.db")
    started = wait(lambda: count(shard2) >= 1, 120)
    subprocess.run(["scancel", "%s_2" % jobs["array"]], env=env, check=False)
    at_cancel = count(shard2)
    checks.check(started and 0 < at_cancel < len(expected), "shard 2 cancelled mid-way with %d measurements" % at_cancel)
    others = wait(lambda: all(os.path.exists(os.path.join(fleet, "shards", "shard-%d.done" % k)) for k in (0, 1, 3)),
                  300, 0.3)
    checks.check(others, "shards 0, 1 and 3 finished")
    merge_gone = wait(lambda: cluster.state(jobs["merge"]) == "", 60, 0.3)
    checks.check(merge_gone and not os.path.exists(os.path.join(fleet, "merged")),
                 "the merge job did not run after a shard failed (state '%s')" % cluster.state(jobs["merge"]))
    checks.check(not os.path.exists(os.path.join(fleet, "shards", "shard-2.done")), "shard 2 is not marked done")

    open(os.path.join(tmp, "resumed"), "w").close()
    again = subprocess.run(["bash", SUBMIT, "--out", fleet], env=env, capture_output=True, text=True, timeout=60)
    checks.check(again.returncode == 0 and "(shards 2 of 4)" in again.stdout,
                 "submit.sh again resubmits shard 2 only: %s %s" % (again.stdout.strip(), again.stderr.strip()))
    merged_flag = os.path.join(fleet, "merged")
    done = wait(lambda: os.path.exists(merged_flag), 300, 0.3)
    with open(os.path.join(fleet, "logs", "shard-2.log")) as f:
        log2 = f.read()
    tuned = [line for line in log2.splitlines() if line.startswith("tuned ")]
    already = int(tuned[-1].rsplit(" ", 1)[1]) if tuned else -1
    checks.check(already >= at_cancel > 0, "shard 2 resumed from its database: %s" % (
        tuned[-1] if tuned else log2[-300:]))
    if not checks.check(done, "the merge job ran"):
        print(cluster.logs())
        return
    merged = measurements(os.path.join(fleet, "tuning.db"))
    missing = sorted(set(expected) - set(merged))
    extra = sorted(set(merged) - set(expected))
    checks.check(not missing and not extra and len(set(merged)) == len(merged),
                 "merged database: %d measurements, the single-process sweep's %d, same (device, problem, variant) "
                 "set (missing %s, extra %s)" % (len(merged), len(expected), missing[:2], extra[:2]))
    verify = subprocess.run([attune, "db", "--db", os.path.join(fleet, "tuning.db"), "verify"], capture_output=True,
                            text=True)
    checks.check(verify.returncode == 0, "db verify of the merged database: %s" % (verify.stdout + verify.stderr).strip())
    checks.check(os.path.getsize(os.path.join(fleet, "report.html")) > 1000, "report.html written")
    with open(os.path.join(fleet, "logs", "merge.log")) as f:
        merge_log = f.read()
    checks.check(merge_log.count("measurements added") >= 4, "merge reported each shard:\n" + merge_log.strip())


if __name__ == "__main__":
    sys.exit(main())
