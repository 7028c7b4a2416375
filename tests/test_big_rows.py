"""A reduce task's memory does not grow with the map outputs it reads: many map outputs of rows
larger than a network buffer into two reducers (``run_big_rows.py``), on executors whose heap is
smaller than all the outputs one reducer reads. Before the reader dropped each input's decode
state at the input's end, every executor died of ``OutOfMemoryError`` on this job (160 maps x
4 MiB rows, 512 MiB executors), and Spark retried the reducers on recomputed map outputs, as it
does after a FetchFailed; the sort shuffle runs it.

The answer (per reducer: rows, sum of ids, bytes, sum of CRC32s) is computed here from the rows'
definition (``run_big_rows.expected``), the same answer the sort shuffle gives.
"""

from __future__ import annotations

import pytest
import run_big_rows
from test_real_shapes import run_app

MAPS = 160
ROW_KB = 4096
MASTER = "local-cluster[2,1,512]"


@pytest.mark.timeout(900)
def test_many_map_outputs_of_big_rows_complete_with_the_exact_answer() -> None:
    args = [run_big_rows.__file__, "--single", "--shuffle", "sluice", "--maps", str(MAPS), "--row-kb", str(ROW_KB)]
    result = run_app(args, timeout=600, master=MASTER)
    assert "error" not in result, f"{result.get('key_errors')}\n{result.get('stages')}\n{result['log_tail']}"
    assert result["answer"] == run_big_rows.expected(MAPS, ROW_KB)
    assert "OutOfMemoryError" not in result["log_tail"], result["log_tail"]
