"""How a checkpoint stores and runs its GEMM weights: one dtype per GEMM class, and their bytes.

A checkpoint's ``quantization_config`` quantises GEMM classes separately: DeepSeek-V3's FP8
checkpoint runs every projection as FP8 with 128x128 block scales but keeps the LM head in bf16;
Kimi-K2-Thinking's INT4 QAT checkpoint quantises only the routed experts. :class:`GemmDtypes`
records that per class (:data:`~prfaas_plan.vocab.GemmClass`), and
:meth:`GemmDtypes.bytes_per_param` gives what one weight occupies, its scales included:

* ``bf16``: 2 B.
* ``fp8`` (e4m3, one scale per tensor): 1 B (the scale is negligible).
* ``fp8_block`` (e4m3, one fp32 scale per ``block x block`` weights): 1 + 4 / block^2 B
  (block 128: 1.000244 B).
* ``int4_w4a16`` (int4 weights, one bf16 scale per ``group_size`` weights, symmetric, so no
  zero point): 0.5 + 2 / group_size B (group 32: 0.5625 B).
* ``mxfp4_w4a16`` (OCP MXFP4: e2m1 weights, one 8-bit e8m0 scale per block of 32, fixed by the
  format): 0.5 + 1 / 32 = 0.53125 B; ``mxfp4_w4a8`` stores the same weights (its activations are
  MXFP8).
* ``nvfp4`` (NVIDIA NVFP4: e2m1 weights and activations, one FP8 e4m3 scale per 16 elements and one
  fp32 scale per tensor): 0.5 + 1 / 16 = 0.5625 B.

Weights outside the four classes (the input embedding, MoE routers, the non-matmul parameters of
linear-attention layers) stay bf16 in every checkpoint of the model database
(:data:`UNQUANTISED_BYTES_PER_PARAM`): quantisers convert Linear layers only, and routers are
listed in ``modules_to_not_convert`` or are not Linear layers.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

from prfaas_plan.data import validate
from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import DTYPE_BYTES
from prfaas_plan.vocab import GEMM_CLASSES, GEMM_DTYPES, GemmClass, GemmDtype

UNQUANTISED_BYTES_PER_PARAM = DTYPE_BYTES["bf16"]
"""Bytes of a weight no quantiser converts (input embedding, routers, vector parameters): bf16
(fp32 in an all-fp32 model: the CPU microbenchmark's drafts)."""
_FP32_SCALE_BYTES = 4.0
_BF16_SCALE_BYTES = DTYPE_BYTES["bf16"]
MX_BLOCK = 32
"""Elements per shared scale in the OCP Microscaling formats (MX v1.0 spec, section 5: k = 32, the
scale an 8-bit E8M0 power of two;
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf)."""
_E8M0_SCALE_BYTES = 1.0
NVFP4_BLOCK = 16
"""Elements per FP8 (e4m3) scale in NVFP4, beside one fp32 scale per tensor
(https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/)."""
_E4M3_SCALE_BYTES = 1.0


class GemmDtypes(BaseModel):
    """The dtype of each GEMM class of a checkpoint (``model_db`` field ``gemm_dtypes``).

    ``dense_ffn`` covers dense FFN layers and shared experts; ``experts`` the routed experts.
    ``group_size``: weights per bf16 scale, required when a class is ``int4_w4a16`` and refused
    otherwise. ``block``: side of the square weight block one fp32 scale covers in ``fp8_block``
    (DeepSeek-style ``weight_block_size: [128, 128]``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    attention: GemmDtype
    dense_ffn: GemmDtype
    experts: GemmDtype
    lm_head: GemmDtype
    group_size: PositiveInt | None = None
    block: PositiveInt = 128

    @model_validator(mode="after")
    def _check(self) -> GemmDtypes:
        grouped = [c for c in GEMM_CLASSES if getattr(self, c) == "int4_w4a16"]
        if grouped and self.group_size is None:
            raise ValueError(f"{', '.join(grouped)} is int4_w4a16: set group_size (weights per bf16 scale, e.g. 32)")
        if self.group_size is not None and not grouped:
            raise ValueError("group_size is set but no class is int4_w4a16; drop it")
        return self

    @classmethod
    def uniform(cls, dtype: GemmDtype, group_size: int | None = None) -> GemmDtypes:
        """Every class in ``dtype`` (a bf16 checkpoint: ``GemmDtypes.uniform("bf16")``)."""
        return validate(cls, {**dict.fromkeys(GEMM_CLASSES, dtype), "group_size": group_size}, "gemm_dtypes")

    def of(self, cls: GemmClass) -> GemmDtype:
        """The dtype of GEMM class ``cls``."""
        if cls not in GEMM_CLASSES:
            raise InvalidInput(f"gemm class {cls!r} is unknown; use one of {', '.join(GEMM_CLASSES)}")
        return getattr(self, cls)

    def bytes_per_param(self, cls: GemmClass) -> float:
        """Bytes one weight of class ``cls`` occupies, scales included (module docstring)."""
        dtype = self.of(cls)
        if dtype == "fp8_block":
            return DTYPE_BYTES["fp8"] + _FP32_SCALE_BYTES / self.block**2
        if dtype == "int4_w4a16":
            return DTYPE_BYTES["int4"] + _BF16_SCALE_BYTES / self.group_size
        if dtype in ("mxfp4_w4a16", "mxfp4_w4a8"):
            return DTYPE_BYTES["int4"] + _E8M0_SCALE_BYTES / MX_BLOCK  # 4-bit elements, whatever their encoding
        if dtype == "nvfp4":
            return DTYPE_BYTES["int4"] + _E4M3_SCALE_BYTES / NVFP4_BLOCK
        return DTYPE_BYTES[dtype]

    @property
    def unquantised_bytes_per_param(self) -> float:
        """Bytes of a weight outside the four classes (:data:`UNQUANTISED_BYTES_PER_PARAM`; 4 in an
        all-fp32 model, whose embedding and routers are fp32 too)."""
        fp32 = all(getattr(self, c) == "fp32" for c in GEMM_CLASSES)
        return DTYPE_BYTES["fp32"] if fp32 else UNQUANTISED_BYTES_PER_PARAM

    def replace(self, **overrides: str | int | None) -> GemmDtypes:
        """A copy with some classes (or ``group_size`` / ``block``) changed, validated:
        ``replace(experts="int4_w4a16", group_size=32)``. Unknown names and dtypes are one-line
        :class:`~prfaas_plan.errors.InvalidInput` errors naming the field and the allowed values.
        ``group_size`` is dropped when no class stays int4_w4a16."""
        fields = (*GEMM_CLASSES, "group_size", "block")
        for name, value in overrides.items():
            if name not in fields:
                raise InvalidInput(f"gemm_dtypes: {name!r} is not a GEMM class; use one of {', '.join(fields)}")
            if name in GEMM_CLASSES and value not in GEMM_DTYPES:
                raise InvalidInput(f"gemm_dtypes.{name}: {value!r} is not a GEMM dtype; "
                                   f"use one of {', '.join(GEMM_DTYPES)}")
        data = {**self.model_dump(), **overrides}
        if "group_size" not in overrides and "int4_w4a16" not in (data[c] for c in GEMM_CLASSES):
            data["group_size"] = None
        return validate(GemmDtypes, data, "gemm_dtypes")

    def describe(self) -> str:
        """``"fp8_block (lm_head bf16)"``: the commonest dtype, then the classes that differ."""
        def name(dtype: str) -> str:
            return f"{dtype} g{self.group_size}" if dtype == "int4_w4a16" else dtype

        dtypes = [getattr(self, c) for c in GEMM_CLASSES]
        main = max(dtypes, key=dtypes.count)
        rest = ", ".join(f"{c} {name(d)}" for c, d in zip(GEMM_CLASSES, dtypes, strict=True) if d != main)
        return f"{name(main)} ({rest})" if rest else name(main)


__all__ = ["MX_BLOCK", "NVFP4_BLOCK", "UNQUANTISED_BYTES_PER_PARAM", "GemmDtypes"]
