"""The cooperative program (targets/opencl/cooperative.py) as text: which kernels join a segment, how
work-item ids become parameters, how a one-barrier kernel splits into its fill and the rest, and which
earlier steps a step waits for. No OpenCL needed; tests/opencl/test_cooperative.py runs the result."""

from __future__ import annotations

import pytest
from tessel.targets.opencl import cooperative as coop

PLAIN = """// a comment with a brace {
__kernel void k0_add(__global const float* restrict in0, __global float* restrict out0) {
    const int g = get_global_id(0);
    if (g >= 100) return;  /* } */
    out0[g] = in0[g] + (float)get_local_size(0) + (float)get_num_groups(1);
}
"""

FILL = """__kernel void k1_dw(__global const float* restrict X, __global float* restrict Y) {
    __local float L[64];
    {  // the fill
        for (int i = get_local_id(0); i < 64; i += 4) {
            L[i] = X[get_group_id(0) * 64 + i];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int t = get_global_id(0);
    const __local float* xb = L;
    Y[t] = xb[(t * 5) % 64];
}
"""

LOOPED = """__attribute__((reqd_work_group_size(8, 1, 1)))
// a scan: barriers inside its loop
__kernel void k2_scan(__global float* restrict out0) {
    const int l = get_local_id(0);
    for (int s = 0; s < 4; ++s) {
        out0[l] += 1.0f;
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
"""


def task(name: str, g: tuple[int, ...], local: tuple[int, ...] | None, *regions: tuple[int, int, bool]
         ) -> coop.Task:
    return coop.Task(name, g, local, tuple(regions))


def test_extents_skip_comments() -> None:
    ext = coop.kernel_extents(PLAIN + FILL)
    assert sorted(ext) == ["k0_add", "k1_dw"]
    start, close, end = ext["k0_add"]
    src = PLAIN + FILL
    assert src[start:].startswith("__kernel void k0_add(") and src[close] == ")"
    assert src[end - 1] == "}" and src[end:].startswith("\n__kernel void k1_dw")


def test_ids_become_parameters_and_sizes_literals() -> None:
    text = coop._rewrite_ids(
        "get_global_id(0) get_local_id(1) get_group_id(2) get_local_size(0) get_num_groups(1) "
        "get_global_size(0) get_global_offset(0) get_work_dim() get_global_id(d)", (5, 3, 1), (4, 1, 1), 2)
    parts = text.split(" ")
    assert parts[:8] == ["(_g0", "*", "4", "+", "_l0)", "_l1", "_g2", "4"]
    assert " 3 20 0 2 " in text  # num_groups(1), global_size(0), global_offset, work_dim
    assert text.endswith("((d) == 0 ? (_g0 * 4 + _l0) : (d) == 1 ? (_g1 * 1 + _l1) : (_g2 * 1 + _l2))")


def test_fill_then_barrier_splits_in_two() -> None:
    form = coop.phased(FILL[FILL.index("{") - 1 :])
    assert form is not None and form.arrays == (("float", "L", 64),)
    assert "L[i] = X" in form.fill and "barrier" not in form.fill + form.rest
    assert form.rest.lstrip().startswith("const int t") and form.scratch == 256


@pytest.mark.parametrize("body", [
    "{ __local float L[4]; const int i = get_local_id(0); { L[i] = 1.0f; } barrier(CLK_LOCAL_MEM_FENCE); }",
    "{ __local float L[4]; { L[0] = 1.0f; } barrier(CLK_LOCAL_MEM_FENCE); L[1] = 0; "
    "barrier(CLK_LOCAL_MEM_FENCE); }",
    "{ __local float L[4]; { L[0] = 1.0f; } }",
    "{ __local quux L[4]; { L[0] = 1.0f; } barrier(CLK_LOCAL_MEM_FENCE); }",
])
def test_other_barrier_kernels_do_not_split(body: str) -> None:
    """A declaration before the barrier (the rest might use it), two barriers, none, an unknown type."""
    assert coop.phased(body) is None


def test_segments_split_at_a_kernel_that_runs_alone() -> None:
    src = PLAIN + FILL + LOOPED
    tasks = [
        task("k0_add", (128,), (4,), (0, 400, False), (1000, 400, True)),
        task("k1_dw", (8, 1), (4, 1), (1000, 400, False), (2000, 128, True)),
        task("k2_scan", (8,), (8,), (2000, 128, False), (3000, 32, True)),  # reads step 1's output
        task("k0_add", (128,), (4,), (3000, 400, False), (4000, 400, True)),  # reads step 2's
    ]
    p = coop.plan(src, tasks)
    assert [(s.steps, s.kernel) for s in p.segments] == [
        ((0, 1), "tessel_coop_0"), ((2,), None), ((3,), "tessel_coop_2")]
    assert "reqd_work_group_size" not in p.source and "k2_scan" not in p.source
    assert "static void k0_add(" in p.source and "__kernel void k0_add" not in p.source
    assert "static void k1_dw_fill(" in p.source
    assert "__global float* L = (__global float*)(_scratch + 0);" in p.source
    assert "__local" not in p.source.split("// cooperative execution")[0]
    assert p.table == [0, 1000, 1000, 2000, 2000, 3000, 3000, 4000] and p.scratch == 256 and p.counters == 9
    kernels = {k.split("(")[0]: k for k in p.source.split("__kernel void ")[1:]}
    assert sorted(kernels) == ["tessel_coop_0", "tessel_coop_2", "tessel_pool"]
    # the pool's kernel runs run after run, each on the counters' half of its generation's parity, and
    # spins for the next between them
    assert "tessel_pool_run(P, C + (g & 1) * 41, X);" in kernels["tessel_pool"]
    if coop.CYCLE_COUNTER:  # for POOL_WAIT_US, in cycle-counter ticks the runner passes
        assert "volatile __global int* K, const ulong WAIT)" in kernels["tessel_pool"]
        assert "if (t - t0 > WAIT) return;" in kernels["tessel_pool"]
    else:
        assert f"if (spin == {coop.POOL_SPIN}) return;" in kernels["tessel_pool"]
    pool = p.source.split("static void tessel_pool_run(")[1].split("__kernel void")[0]
    # its run function runs every cooperative step; before step 3 it waits for the lone step's flag
    assert "// step 2" not in pool and pool.index("// step 1") < pool.index("// step 3")
    assert "tessel_wait(S, 5, 1, 8)" in pool.split("// step 3")[1]
    # step 1 reads what step 0 wrote: it waits for step 0's 32 work-groups
    assert "tessel_wait(S, 1, 32, 8)" in pool.split("// step 1")[1].split("for (int c")[0]
    # the calling thread leaves its first segment once what the lone step reads is done
    assert kernels["tessel_coop_0"].rstrip().endswith("if (!tessel_wait(S, 3, 2, 8)) return;\n}")
    # the fill of every work-item, then the rest: the barrier
    assert pool.index("k1_dw_fill(") < pool.index("k1_dw((__global void*)")


def test_dependencies_follow_shared_bytes() -> None:
    a = task("a", (1,), None, (0, 100, False), (100, 100, True))  # reads [0, 100), writes [100, 200)
    b = task("b", (1,), None, (100, 100, False), (200, 100, True))  # reads a's output
    c = task("c", (1,), None, (0, 50, False), (300, 100, True))  # reads what a reads: independent
    d = task("d", (1,), None, (200, 100, False), (0, 100, True))  # reads b's output, overwrites a's input
    e = task("e", (1,), None, (150, 10, False), (400, 10, True))  # reads inside a's output
    deps = coop.dependencies([a, b, c, d, e], [0, 1, 2, 3, 4])
    # d conflicts with a (it overwrites a's and c's input) and b; a is implied through b
    assert deps == {0: [], 1: [0], 2: [], 3: [1, 2], 4: [0]}


def test_a_global_size_not_divided_by_its_local_size_runs_alone() -> None:
    p = coop.plan(PLAIN, [task("k0_add", (100,), (8,), (0, 400, False), (1000, 400, True))])
    assert [(s.steps, s.kernel) for s in p.segments] == [((0,), None)]


def test_a_profiling_plan_reads_the_cycle_counter_around_each_chunk() -> None:
    t = task("k0_add", (128,), (4,), (0, 400, False), (1000, 400, True))
    plain, profiled = coop.plan(PLAIN, [t]), coop.plan(PLAIN, [t], profile=True)
    # a plain plan reads the counter only in the pool's wait between runs
    assert "readcyclecounter" not in plain.source.split("__kernel void tessel_pool(")[0] and not plain.profile
    pool = profiled.source.split("__kernel void tessel_pool(")[1]
    assert pool.startswith("__global const ulong* restrict P, __global int* C, __global char* X, "
                           "__global ulong* T0, const int TH, volatile __global int* K")
    assert "tessel_pool_run(P, C + (g & 1) * 35, X, T0 + (g & 1) * TH);" in pool  # the times' half too
    run = profiled.source.split("static void tessel_pool_run(")[1]
    assert run.startswith("__global const ulong* restrict P, __global int* C, __global char* X, "
                          "__global ulong* T0)")
    body = run.split("for (int c = ")[1]
    assert body.index("_t0 = __builtin_readcyclecounter()") < body.index("k0_add(") < body.index(
        "_t1 = __builtin_readcyclecounter()") < body.index("T[1] = max(T[1], _t1);") < body.index(
        "atomic_add(&S[1], e - c)")
