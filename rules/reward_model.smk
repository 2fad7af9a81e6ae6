# Reward models (TRL RewardTrainer): helpfulness and harmlessness, from preference pairs.


rule reward_model:
    input:
        model=lambda wc: model_path(config["reward_model"]["init"]),
        data=data_input("preferences_{kind}", "reward_model"),
        chat_template=chat_template_input(config["reward_model"]["init"], "reward_model"),
    output:
        directory(result("reward_model_{kind}")),
    log:
        log_file("reward_model_{kind}"),
    benchmark:
        benchmark_file("reward_model_{kind}")
    params:
        **training_params("reward_model"),
        chat_template=chat_template_arg(config["reward_model"]["init"]),
    threads: 2
    resources:
        **stage_resources("reward_model"),
    container:
        container_image("reward_model")
    shell:
        "{params.launch} --model_path {input.model} --data {input.data}{params.chat_template}" + TRAINED_INTO
