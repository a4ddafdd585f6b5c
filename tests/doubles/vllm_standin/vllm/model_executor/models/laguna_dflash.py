# Stand-in for vLLM's vllm/model_executor/models/laguna_dflash.py, written for
# the laguna-spark tests. It keeps the shape of the real loader (and its bug)
# without torch: DFlashLagunaModel.load_weights asks the quant config for
# KV-cache scales, and a W4A16 quant config has no get_cache_scale.
from __future__ import annotations

from typing import Iterable


def default_weight_loader(param, loaded_weight):
    param["data"] = loaded_weight


class DFlashLagunaModel:
    def __init__(self, quant_config=None, num_layers: int = 2):
        self.quant_config = quant_config
        self.params = {
            "layers.%d.self_attn.qkv_proj.weight" % i: {"data": None}
            for i in range(num_layers)
        }
        self.params.update({
            "layers.%d.self_attn.attn.k_scale" % i: {"data": None}
            for i in range(num_layers)
        })

    def named_parameters(self):
        return self.params.items()

    def load_weights(self, weights: Iterable[tuple[str, object]]) -> set[str]:
        params_dict = dict(self.named_parameters())
        loaded_params: set[str] = set()
        for name, loaded_weight in weights:
            if self.quant_config is not None and (
                scale_name := self.quant_config.get_cache_scale(name)
            ):
                # Loading kv cache quantization scales
                param = params_dict[scale_name]
                weight_loader = getattr(param, "weight_loader", default_weight_loader)
                weight_loader(param, loaded_weight)
                loaded_params.add(scale_name)
                continue
            if name not in params_dict:
                continue
            default_weight_loader(params_dict[name], loaded_weight)
            loaded_params.add(name)
        return loaded_params


class DFlashLagunaForCausalLM:
    def __init__(self, quant_config=None):
        self.model = DFlashLagunaModel(quant_config=quant_config)

    def load_weights(self, weights):
        return self.model.load_weights(weights)
