# Pre-trained models: the tiny config builds and pre-trains its base model (and tiny students) from
# scratch; real configs fetch hub models into the run once, on the login node.


if pretrained_stages("build"):

    rule base:
        # Also builds tiny students: the same pre-training, smaller (their `build` section).
        input:
            corpus=data_input("pretrain", "base"),
        output:
            directory(result("{built}")),
        log:
            log_file("{built}"),
        benchmark:
            benchmark_file("{built}")
        params:
            seed=config["seed"],
            work=lambda wc: work_dir(wc.built),
            args=lambda wc: stage_args(pretrained_model_spec(wc.built)["build"]),
        wildcard_constraints:
            built="|".join(pretrained_stages("build")),
        threads: 2
        resources:
            **stage_resources("base"),
        container:
            container_image("base")
        shell:
            "python -m stages.base_model --stage {wildcards.built} --corpus {input.corpus} --output_dir {output}"
            " --work_dir {params.work}"
            " --seed {params.seed} {params.args} > {log} 2>&1"


if pretrained_stages("hub"):

    rule fetch_model:
        output:
            directory(result("{fetched}")),
        log:
            log_file("fetch_{fetched}"),
        benchmark:
            benchmark_file("fetch_{fetched}")
        params:
            online=ONLINE,
            name=lambda wc: pretrained_model_spec(wc.fetched)["name_or_path"],
            revision=lambda wc: pretrained_model_spec(wc.fetched).get("revision", ""),
        wildcard_constraints:
            fetched="|".join(pretrained_stages("hub")),
        localrule: True
        container:
            image("cpu")
        shell:
            "{params.online} python -m stages.fetch_model --name_or_path {params.name} --revision '{params.revision}'"
            " --output_dir {output} > {log} 2>&1"
