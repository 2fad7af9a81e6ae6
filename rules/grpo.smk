# GRPO stages (TRL GRPOTrainer): R1-Zero straight on the base model, and reasoning RL (Dev2) on Dev1.


rule r1_zero:
    input:
        model=model_path("base"),
        prompts=data_input("rl_prompts", "r1_zero"),
        rewards=reward_files("r1_zero"),
    output:
        directory(result("r1_zero")),
    log:
        log_file("r1_zero"),
    benchmark:
        benchmark_file("r1_zero")
    params:
        **training_params("r1_zero"),
    threads: 2
    resources:
        **stage_resources("r1_zero"),
    container:
        container_image("r1_zero")
    shell:
        "{params.launch} --model_path {input.model} --train_data {input.prompts}" + TRAINED_INTO


rule reasoning_rl:
    input:
        model=artifact("cold_start_sft"),
        prompts=data_input("rl_prompts", "reasoning_rl"),
        rewards=reward_files("reasoning_rl"),
    output:
        directory(result("reasoning_rl")),
    log:
        log_file("reasoning_rl"),
    benchmark:
        benchmark_file("reasoning_rl")
    params:
        **training_params("reasoning_rl"),
    threads: 2
    resources:
        **stage_resources("reasoning_rl"),
    container:
        container_image("reasoning_rl")
    shell:
        "{params.launch} --model_path {input.model} --train_data {input.prompts}" + TRAINED_INTO


rule final_rl:
    # R1: GRPO from Dev3; rule rewards on reasoning prompts, reward models on general prompts (last phase).
    input:
        model=artifact("mixture_sft"),
        prompts=data_input("rl_prompts", "final_rl"),
        general=data_input("rl_general", "final_rl"),
        helpful=artifact("reward_model_helpful"),
        harmless=artifact("reward_model_harmless"),
        rewards=reward_files("final_rl"),
    output:
        directory(result("final_rl")),
    log:
        log_file("final_rl"),
    benchmark:
        benchmark_file("final_rl")
    params:
        **training_params("final_rl"),
    threads: 2
    resources:
        **stage_resources("final_rl"),
    container:
        container_image("final_rl")
    shell:
        "{params.launch} --model_path {input.model} --train_data {input.prompts} --general_data {input.general}"
        " --helpful_reward_model {input.helpful} --harmless_reward_model {input.harmless}" + TRAINED_INTO
