"""Reading real ``config.json`` layouts into ``Qwen35Config`` / ``Qwen2Config``, and derived quantities."""

from __future__ import annotations

import pytest

from mini_deepinfer.models import (
    Qwen2Config,
    Qwen35Config,
    UnknownArchitectureError,
    build_model,
    config_from_hf_dict,
)

TEXT_08B = {
    "model_type": "qwen3_5_text",
    "vocab_size": 248320,
    "hidden_size": 1024,
    "intermediate_size": 3584,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attn_output_gate": True,
    "mtp_num_hidden_layers": 1,
    "max_position_embeddings": 262144,
    "eos_token_id": 248044,
    "rope_parameters": {
        "mrope_interleaved": True,
        "mrope_section": [11, 11, 10],
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
    },
}

R1_DISTILL_1_5B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "max_position_embeddings": 131072,
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 21,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "torch_dtype": "bfloat16",
}


def multimodal(text: dict, **top) -> dict:
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {**text, "model_type": "qwen3_5_text"},
        "vision_config": {"depth": 12, "hidden_size": 768},
        **top,
    }


def test_multimodal_qwen3_5_config_reads_the_nested_text_model():
    config = config_from_hf_dict(multimodal(TEXT_08B, tie_word_embeddings=True))
    assert isinstance(config, Qwen35Config)
    assert config.architecture == "Qwen3_5ForConditionalGeneration"
    assert config.tie_word_embeddings and config.rope_theta == 1e7 and config.rotary_dim == 64
    assert config.full_attention_layers == [3, 7, 11, 15, 19, 23]
    assert len(config.linear_attention_layers) == 18
    assert config.linear_conv_dim == 6144 and config.eos_token_id == 248044


def test_top_level_tie_word_embeddings_wins_over_missing_nested_value():
    config = Qwen35Config.from_hf_dict(multimodal(TEXT_08B, tie_word_embeddings=True))
    assert config.tie_word_embeddings
    assert not Qwen35Config.from_hf_dict(multimodal(TEXT_08B)).tie_word_embeddings


def test_flat_text_config_with_layer_types_and_top_level_partial_rotary_factor():
    text = {k: v for k, v in TEXT_08B.items() if k != "full_attention_interval"}
    text.update(
        architectures=["Qwen3_5ForCausalLM"],
        layer_types=["linear_attention", "full_attention"] * 12,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000},
        partial_rotary_factor=0.5,
        tie_word_embeddings=True,
    )
    config = config_from_hf_dict(text)
    assert config.architecture == "Qwen3_5ForCausalLM"
    assert config.full_attention_layers == list(range(1, 24, 2)) and config.rotary_dim == 128


def test_qwen2_legacy_and_current_rope_fields_agree():
    legacy = config_from_hf_dict(R1_DISTILL_1_5B)
    current = {k: v for k, v in R1_DISTILL_1_5B.items() if k != "rope_theta"}
    current["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000}
    assert isinstance(legacy, Qwen2Config) and legacy == Qwen2Config.from_hf_dict(current)
    assert legacy.head_dim == 128 and legacy.checkpoint_dtype == "bfloat16"
    assert legacy.full_attention_layers == list(range(28)) and legacy.linear_attention_layers == []


def millions(config: Qwen35Config | Qwen2Config) -> float:
    return round(config.num_parameters() / 1e6, 1)


def test_parameter_counts_of_the_released_shapes():
    text_2b = {**TEXT_08B, "hidden_size": 2048, "intermediate_size": 6144}
    assert millions(Qwen35Config.from_hf_dict(multimodal(TEXT_08B, tie_word_embeddings=True))) == 752.4
    assert millions(Qwen35Config.from_hf_dict(multimodal(text_2b, tie_word_embeddings=True))) == 1881.8
    assert millions(Qwen2Config.from_hf_dict(R1_DISTILL_1_5B)) == 1777.1


@pytest.mark.parametrize("tied", [True, False])
def test_parameter_count_equals_the_built_model(tied):
    qwen35 = Qwen35Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
                          linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=4,
                          tie_word_embeddings=tied, attention_bias=not tied)
    qwen2 = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    for config in (qwen35, qwen2):
        model = build_model(config)
        assert config.num_parameters() == sum(p.numel() for p in model.parameters())


def test_unknown_architecture_raises_one_line_error_naming_it():
    with pytest.raises(UnknownArchitectureError, match="LlamaForCausalLM.*supported: Qwen3_5") as info:
        config_from_hf_dict({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    assert "\n" not in str(info.value) and isinstance(info.value, ValueError)


def test_unsupported_rope_type_and_sliding_window_are_rejected():
    with pytest.raises(ValueError, match="rope_type"):
        config_from_hf_dict({**R1_DISTILL_1_5B, "rope_scaling": {"type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="sliding"):
        config_from_hf_dict({**R1_DISTILL_1_5B, "use_sliding_window": True})


def test_layer_types_must_match_the_layer_count():
    with pytest.raises(ValueError, match="layer_types"):
        Qwen35Config(num_hidden_layers=3, layer_types=("full_attention",))
