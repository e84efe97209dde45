"""Values crossing the judge/side boundary keep their own bytes: every tensor of a call at its own arena
offset (the judge once wrote and read them all at offset 0, so a side saw ``add(b, b)`` for ``add(a, b)``),
and named tuples (``torch.return_types.*``, a decomposition's ``return_types_*``) come back as tuples."""

from __future__ import annotations

import collections
import gc
import weakref

import torch
from kernel_service.judging import transport


def test_every_tensor_of_a_call_lands_at_its_own_offset() -> None:
    a = torch.tensor(-8.5)
    b = torch.arange(6.0).reshape(2, 3).t()  # non-contiguous
    idx = torch.tensor([3, 1, 2])
    arena = transport.Arena(4096, torch.device("cpu"))
    try:
        packed, write = transport.pack(([a, b, 2.5], {"index": idx}), arena)
        write()
        offsets = [r.offset for r in (packed[0][0], packed[0][1], packed[1]["index"])]
        assert len(set(offsets)) == 3
        args, kwargs = transport.unpack(packed, arena.bytes)
        assert torch.equal(args[0], a) and torch.equal(args[1], b) and args[2] == 2.5
        assert args[1].stride() == b.stride() and torch.equal(kwargs["index"], idx)
    finally:
        arena.close()


def test_outputs_decode_from_their_own_offsets_and_named_tuples_are_tuples() -> None:
    inputs = transport.Arena(1024, torch.device("cpu"))
    outputs = transport.Arena(1024, torch.device("cpu"))
    try:
        pair = collections.namedtuple("return_types_aminmax", ["min", "max"])
        out = pair(torch.tensor([1.0, 2.0]), torch.tensor([7.0, 8.0, 9.0]))
        tree = transport.encode(out, inputs.bytes, outputs.bytes)
        assert tree["k"] == "tuple"
        decoded = transport.decode(tree, inputs, outputs, None)
        assert isinstance(decoded, tuple) and len(decoded) == 2
        assert torch.equal(decoded[0].tensor, out.min) and torch.equal(decoded[1].tensor, out.max)
        maxed = transport.encode(torch.max(torch.tensor([[1.0, 5.0]]), 1), inputs.bytes, outputs.bytes)
        assert maxed["k"] == "tuple"  # torch.return_types.max
    finally:
        inputs.close()
        outputs.close()


def test_crossing_frees_every_tensor_without_the_cyclic_collector() -> None:
    """Packing, writing, describing and decoding leave no reference cycle holding a tensor: the judge's
    inputs and a side's outputs are freed when the call drops them. (Recursive closures once kept views of
    every input until Python's cyclic collector ran: on the H100 seven freed 6 GiB inputs of one problem
    were still allocated when the eighth did not fit.)"""
    inputs = transport.Arena(1 << 16, torch.device("cpu"))
    outputs = transport.Arena(1 << 16, torch.device("cpu"))
    gc.collect()
    gc.disable()
    try:
        x = torch.randn(64, 64)
        storage = weakref.ref(x.untyped_storage())  # alive while any view of x is
        packed, write = transport.pack(([x, (x[1:], [x.t()])], {"k": x}), inputs)
        write()
        del packed, write, x
        assert storage() is None, "a view of the packed input outlived its call"

        y = torch.randn(32)
        out_storage = weakref.ref(y.untyped_storage())
        tree = transport.encode([y, (y * 2, 3.0)], inputs.bytes, outputs.bytes)
        del y
        assert out_storage() is None, "the side's output outlived its description"
        decoded = transport.decode(tree, inputs, outputs, None)
        del decoded
        assert gc.collect() == 0, "pack, encode or decode left reference cycles"
    finally:
        gc.enable()
        inputs.close()
        outputs.close()


def _draw_problem(seed: int) -> list[object]:
    """A get_inputs of the usual kinds: factories in return order, one made by arithmetic, one returned
    out of the order it was made in, a scalar."""
    torch.manual_seed(seed)
    x = torch.rand(16, 8)
    y = torch.randn((4,), dtype=torch.float64)
    idx = torch.randint(0, 10, (5,))
    scaled = torch.rand(3) * 2 - 1  # made by arithmetic: copied in
    return [x, y, idx, scaled, 1.5]


def test_inputs_drawn_into_the_arena_equal_those_made_elsewhere_and_only_the_rest_is_copied() -> None:
    made = _draw_problem(7)
    arena = transport.Arena(transport.layout_bytes(made) * 2, torch.device("cpu"))
    try:
        with transport.DrawInto(arena) as drawing:
            drawn = _draw_problem(7)
        assert drawing.cursor > 0
        lo = arena.bytes.data_ptr()
        assert [t.data_ptr() - lo for t in drawn[:3]] == [0, 512, 768]  # where pack puts them
        packed, write = transport.pack(drawn, arena)
        assert [r.offset for r in packed[:3]] == [0, 512, 768]
        write()
        args = transport.unpack(packed, arena.bytes)
        for got, want in zip(args[:4], made[:4], strict=True):
            assert torch.equal(got, want) and got.dtype == want.dtype
        assert args[4] == 1.5
    finally:
        arena.close()


def test_drawn_inputs_returned_out_of_order_are_moved_without_overwriting_each_other() -> None:
    arena = transport.Arena(4096, torch.device("cpu"))
    try:
        with transport.DrawInto(arena):
            torch.manual_seed(3)
            a, b = torch.rand(100), torch.rand(60)  # a at byte 0, b at 512
        want = [b.clone(), a.clone()]
        packed, write = transport.pack([b, a], arena)  # b belongs at 0 (over a), a at 256
        write()
        for got, expected in zip(transport.unpack(packed, arena.bytes), want, strict=True):
            assert torch.equal(got, expected)
    finally:
        arena.close()


def test_factories_drawing_cannot_place_are_made_as_usual() -> None:
    arena = transport.Arena(256, torch.device("cpu"))
    try:
        with transport.DrawInto(arena) as drawing:
            big = torch.rand(1000)  # does not fit
            grad = torch.zeros(3, requires_grad=True)
            other = torch.rand(2, dtype=torch.float32, device="meta")
            full = torch.full((2,), 3.0)
        assert drawing.cursor == 0 and big.numel() == 1000 and grad.requires_grad
        assert other.device.type == "meta" and torch.equal(full, torch.tensor([3.0, 3.0]))
    finally:
        arena.close()


def test_a_factory_for_another_device_than_the_arena_s_is_not_drawn_there() -> None:
    arena = transport.Arena(4096, torch.device("cpu"))
    try:
        with transport.DrawInto(arena) as drawing, torch.device("meta"):
            elsewhere = torch.rand(4)  # the default device is meta here: drawn on the CPU it would differ
        assert drawing.cursor == 0 and elsewhere.device.type == "meta"
        with torch.device("meta"), transport.DrawInto(arena) as drawing:  # asked with no device named
            elsewhere = torch.rand(4)
        assert drawing.cursor == 0 and elsewhere.device.type == "meta"
    finally:
        arena.close()
