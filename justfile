# Recipes wrap the scripts in deploy/local; the scripts work without just.

# Run Clankie locally (installs what is missing, starts NATS + PostgreSQL).
run:
    ./deploy/local/run

# Run the whole test suite.
test *ARGS:
    ./deploy/local/test {{ARGS}}

# Start the local nats-server and PostgreSQL.
up:
    ./deploy/local/stack up

# Stop them.
down:
    ./deploy/local/stack down

# Report what is running.
status:
    ./deploy/local/stack status

# Tap every clankie subject, or the one given.
tap SUBJECT="clankie.>":
    cargo run -q -p clankie -- tap '{{SUBJECT}}'

# Apply migrations.
migrate:
    cargo run -q -p clankie -- migrate
