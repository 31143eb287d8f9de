"""GRPO on envgen packs, TRL-script style; run with accelerate for several GPUs:

    accelerate launch rl/train.py --pack packs/travel --model_name_or_path Qwen/Qwen3-8B \
        --config rl/configs/deepseek_v32.yaml --output_dir out/qwen3-travel

Every EnvgenGRPOConfig field (TRL's GRPOConfig plus keep_sampling_mask, keep_routing, concurrent_tools)
and TRL's ModelConfig fields are flags; `--config` sets their defaults from YAML. `envgen train` runs the
same code in-process.
"""

from envgen.rl.training import main

if __name__ == "__main__":
    main()
