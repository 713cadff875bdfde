"""`logtide logtail tn|cn` as separate processes over gRPC: the CN process reads what a TN reopened
after SIGKILL reads at the same ts."""
import json
import os
import signal
import subprocess

import pytest

from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide_cli import logtide_cmd


@pytest.mark.timeout(120)
def test_tn_and_cn_processes(tmp_path):
    d = tmp_path / "tn"
    tn_p = subprocess.Popen(logtide_cmd() + ["logtail", "tn", str(d), "--load", "300", "--flush-every", "0.5",
                                          "--checkpoint-every", "1.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        hello = json.loads(tn_p.stdout.readline())
        cn_p = subprocess.run(logtide_cmd() + ["logtail", "cn", "--tn", hello["listening"], "--objects",
                                            str(d / "objects"), "--table", "t", "--seconds", "5"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert cn_p.returncode == 0, cn_p.stderr[-3000:]
    finally:
        os.kill(tn_p.pid, signal.SIGKILL)
        tn_p.wait()
    reports = [json.loads(line) for line in cn_p.stdout.splitlines()]
    assert len(reports) >= 2 and reports[-1]["rows"] > 0 and reports[-1]["ts"] > reports[0]["ts"]
    tn = TransactionNode.open(d)
    try:
        cn = ComputeNode(lambda: tn.connect("check"), tn.store)
        cn.subscribe("t")
        for r in reports:
            tab = cn.read("t", r["ts"])
            assert (tab.num_rows, int(tab.column("id").to_numpy().sum())) == (r["rows"], r["id_sum"])
        cn.close()
    finally:
        tn.close()
        tn.log.close()
