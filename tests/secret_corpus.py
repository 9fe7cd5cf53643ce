"""The redaction corpus: secret forms agents paste, and look-alikes that are not secrets.

Every SECRETS entry is (name, text, secret): after redaction `secret` must not
appear anywhere (not in the store, not in a provider request, not in the cache).
Every LOOKALIKES entry must come out of `redact` unchanged; the share that
changes is the measured false-positive rate (tests/test_redact.py). All values
are fabricated; none is a live credential. The rules were tuned on this file;
`tests/secret_corpus_heldout.py` holds the cases they were not tuned on.
"""

from __future__ import annotations

import random


def fixed_string(alphabet: str, n: int, seed: int) -> str:
    """A fixed pseudo-random string: the same on every run, different per seed."""
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


_r = fixed_string


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_HEX = "0123456789abcdef"
_LOWER = "abcdefghijklmnopqrstuvwxyz0123456789"

_PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVlLWZvci10ZXN0aW5nLW9ubHk"
_JWT_SIG = "c2lnbmF0dXJlLXZhbHVlLWZvci10ZXN0aW5nLW9ubHk"
_BASIC = "YWxpY2U6czNjcjN0LXBhc3M="  # alice:s3cr3t-pass


def _pem(label: str) -> str:
    return f"-----BEGIN {label}-----\n{_PEM_BODY}\nQk9HVVMgS0VZ\n-----END {label}-----"


_XAPP = "xapp-1-A04BC5DEF6G-7081920304050-" + _r(_HEX, 64, 101)
_GLDT = "gldt-" + _r(_ALNUM, 20, 102)
_DOCKER = "dckr_pat_" + _r(_ALNUM + "_-", 27, 103)
_DIGITALOCEAN = "dop_v1_" + _r(_HEX, 64, 104)
_DATABRICKS = "dapi" + _r(_HEX, 32, 105)
_VAULT = "hvs." + _r(_ALNUM + "_-", 92, 106)
_VAULT_LEGACY = "s." + _r(_ALNUM, 24, 107)
_TERRAFORM = _r(_LOWER, 14, 108) + ".atlasv1." + _r(_ALNUM, 67, 109)
_SHOPIFY = "shpat_" + _r(_HEX, 32, 110)
_SHOPIFY_SS = "shpss_" + _r(_HEX, 32, 111)
_MAILGUN = "key-" + _r(_LOWER, 32, 112)
_TELEGRAM = "6081234567:AA" + _r(_ALNUM + "_-", 33, 113)
_DISCORD_HOOK = "https://discord.com/api/webhooks/1187654321098765432/" + _r(_ALNUM + "_-", 68, 114)
_ATLASSIAN = "ATATT3xFfGF0" + _r(_ALNUM + "_-", 174, 115) + "=A1B2C3D4"
_HF_ORG = "api_org_" + _r(_ALNUM, 34, 116)
_TWILIO = "SK" + _r(_HEX, 32, 117)
_MAILCHIMP = _r(_HEX, 32, 118) + "-us14"
_SQUARE = "sq0csp-" + _r(_ALNUM + "_-", 43, 119)
_ARTIFACTORY = "AKCp" + _r(_ALNUM, 69, 120)
_DISCORD_BOT = "MTA4" + _r(_ALNUM, 20, 121) + "." + _r(_ALNUM, 6, 122) + "." + _r(_ALNUM, 27, 123)
_KUBE_KEY = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFcEFJQkFBS0NBUUVB" + _r(_ALNUM, 80, 124)
_PPK = _r(_ALNUM + "+/", 64, 125)
_SAS_SIG = _r(_ALNUM + "%", 44, 126)
_SESSIONID = _r(_LOWER, 32, 127)
_PHPSESSID = _r(_LOWER, 26, 128)
_CONNECT_SID = "s%3A" + _r(_ALNUM + "-_", 32, 129) + "." + _r(_ALNUM + "%", 40, 130)


SECRETS: list[tuple[str, str, str]] = [
    # --- PEM blocks
    ("pem_rsa", "key:\n" + _pem("RSA PRIVATE KEY") + "\nthanks", _PEM_BODY),
    ("pem_ec", _pem("EC PRIVATE KEY"), _PEM_BODY),
    ("pem_openssh", "id_ed25519:\n" + _pem("OPENSSH PRIVATE KEY"), _PEM_BODY),
    ("pem_pkcs8", _pem("PRIVATE KEY"), _PEM_BODY),
    ("pem_encrypted", _pem("ENCRYPTED PRIVATE KEY"), _PEM_BODY),
    ("pem_pgp", _pem("PGP PRIVATE KEY BLOCK"), _PEM_BODY),
    (
        "pem_in_json",
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + _PEM_BODY
        + '\\n-----END PRIVATE KEY-----\\n"}',
        _PEM_BODY,
    ),
    # --- cloud and SaaS tokens with a known form
    ("aws_akia", "aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_asia", "temp creds ASIAZXCVBNMASDFGHJKL", "ASIAZXCVBNMASDFGHJKL"),
    (
        "aws_secret_env",
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG",
    ),
    (
        "aws_credentials_file",
        "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "wJalrXUtnFEMI/K7MDENG",
    ),
    ("github_ghp", "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 tok", "ghp_abcdefghij"),
    ("github_gho", "oauth gho_16C7e42F292c6912E7710c838347Ae178B4a", "16C7e42F292c6912E7710c"),
    ("github_ghs", "app token ghs_16C7e42F292c6912E7710c838347Ae178B4a", "16C7e42F292c6912E77"),
    (
        "github_pat",
        "pat github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "11ABCDEFG0123456789",
    ),
    ("gitlab_pat", "GITLAB glpat-xY9zQ2mN4pL7kR1sT3vW", "xY9zQ2mN4pL7kR1sT3vW"),
    ("slack_bot", "slack xoxb-123456789012-abcdefghijkl", "xoxb-1234"),
    ("slack_user", "xoxp-2222222222-3333333333-abcdefabcdef", "3333333333-abcdef"),
    (
        "slack_webhook",
        "post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "XXXXXXXXXXXXXXXXXXXXXXXX",
    ),
    ("openai_sk", "OPENAI sk-abcdefghijklmnopqrstuvwxyz123456", "abcdefghijklmnopqrst"),
    ("openai_proj", "openai sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdef"),
    ("anthropic", "anthropic sk-ant-api03-abcdefghijklmnopqrstuv", "sk-ant-api03"),
    ("stripe_live", "charge with sk_live_51HqLyjWDarjtT1zdp7dc", "51HqLyjWDarjtT1zdp7dc"),
    ("stripe_test", "test key sk_test_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe_restricted", "rk_live_51HqLyjWDarjtT1zdp7dcXYZ", "51HqLyjWDarjtT1zdp7dcXYZ"),
    ("stripe_webhook", "whsec_5f3e9a1b2c4d6e8f0a1b2c3d4e5f6a7b", "5f3e9a1b2c4d6e8f0a1b"),
    ("google_api", "google AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA123"),
    ("google_oauth", "token ya29.a0AfH6SMBx3kL9mN2pQ7rS1tU4vW", "a0AfH6SMBx3kL9mN2pQ7"),
    ("google_client_secret", "GOCSPX-1a2B3c4D5e6F7g8H9i0JkLmN", "1a2B3c4D5e6F7g8H9i0J"),
    ("npm", "//registry.npmjs.org/ npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKl"),
    ("pypi", "twine -p pypi-AgEIcHlwaS5vcmcCJGE0ZjQ1", "AgEIcHlwaS5vcmcCJGE0ZjQ1"),
    ("huggingface", "HF hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "AbCdEfGhIjKlMnOpQrSt"),
    (
        "sendgrid",
        "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",
        "TwL2iGABf9DHoTf",
    ),
    (
        "age_key",
        "AGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSQ3KL",
        "QYQSZQGPQYQSZQGP",
    ),
    # --- JWTs and HTTP auth
    ("jwt_bare", f"the token was {_JWT} ok", _JWT_SIG),
    ("jwt_cookie", f"Set-Cookie: session={_JWT}; HttpOnly", _JWT_SIG),
    ("bearer_header", "Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9.x", "eyJhbGciOi"),
    ("bearer_prose", "use bearer abcdefgh12345 for it", "abcdefgh12345"),
    ("bearer_long", "curl -H 'Authorization: Bearer AbCdEfGhIjKlMnOpQrStUv'", "AbCdEfGhIjKl"),
    ("basic_header", f"Authorization: Basic {_BASIC}", _BASIC),
    ("basic_curl", f'curl -H "Authorization: Basic {_BASIC}" https://api.example.com', _BASIC),
    ("token_scheme", "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bb", "9944b09199c6"),
    ("curl_user", "curl -u alice:s3cr3t-pass https://api.example.com", "s3cr3t-pass"),
    ("curl_user_long", "curl --user deploy:Tr0ub4dor https://x.example.com", "Tr0ub4dor"),
    ("x_api_key", "X-API-Key: 7f9c2ba4e88f827d616045507605853e", "7f9c2ba4e88f827d6160"),
    # --- URLs and connection strings
    ("url_https", "clone https://alice:pa55w0rd@git.example.com/repo.git", "pa55w0rd"),
    ("url_postgres", "postgres://app:Sup3rS3cret@db.internal:5432/app", "Sup3rS3cret"),
    ("url_mongo", "mongodb+srv://admin:hunter2hunter2@cluster0.abc.mongodb.net/db", "hunter2h"),
    ("url_redis_no_user", "REDIS_URL=redis://:r3dis-pw@cache:6379/0", "r3dis-pw"),
    ("url_at_in_password", "amqp://svc:p@ssw0rd@mq.local:5672", "ssw0rd"),
    (
        "database_url_env",
        "DATABASE_URL=mysql://root:Myp4ssw0rd!@localhost/shop",
        "Myp4ssw0rd",
    ),
    (
        "ado_connection",
        "Server=tcp:db.example.net,1433;User ID=sa;Password=Secr3t!Pass;Encrypt=True;",
        "Secr3t!Pass",
    ),
    ("odbc_pwd", "Driver={ODBC};Server=db;Uid=app;Pwd=0dbcS3cret;", "0dbcS3cret"),
    (
        "azure_storage",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5==;",
        "Zm9vYmFyYmF6cXV4",
    ),
    # --- assignments: environment, code, config
    ("password_eq", "password=hunter22 then", "hunter22"),
    ("pgpassword", "PGPASSWORD=pgS3cret psql -h db", "pgS3cret"),
    ("mysql_pwd", "MYSQL_PWD=my5qlpw mysql -u root", "my5qlpw"),
    ("github_token_env", "GITHUB_TOKEN=abc123def456ghi789", "abc123def456ghi789"),
    ("export_quoted", 'export API_KEY="abcd1234efgh"', "abcd1234efgh"),
    ("secret_env", "DJANGO_SECRET_KEY='django-insecure-8#x!q2'", "django-insecure-8#x!q2"),
    ("dotenv_client_secret", "CLIENT_SECRET=c1i3nt-s3cr3t-v4lue", "c1i3nt-s3cr3t-v4lue"),
    ("python_kwarg", 'connect(host="db", password="pyth0nPw")', "pyth0nPw"),
    ("powershell", '$env:API_KEY = "ps-k3y-value-123"', "ps-k3y-value-123"),
    ("passwd_colon", "db_passwd:pa55", "pa55"),
    ("secret_single_quoted", "secret: 's3cr3t value'", "s3cr3t value"),
    ("yaml_password", "database:\n  user: app\n  password: yamlS3cret\n", "yamlS3cret"),
    ("yaml_plain_word", "smtp:\n  password: swordfish\n", "swordfish"),
    ("yaml_api_key_quoted", 'service:\n  api_key: "yml-key-8812"\n', "yml-key-8812"),
    ("yaml_token", "auth_token: tok_9f8e7d6c5b4a", "tok_9f8e7d6c5b4a"),
    ("toml_passphrase", 'passphrase = "correct horse battery staple"', "correct horse battery"),
    # --- JSON, Python reprs, encoded JSON
    ("json_password", '{"user": "alice", "password": "j50nPassw0rd"}', "j50nPassw0rd"),
    ("json_api_key", '{"api_key": "k-19a8b7c6d5e4"}', "k-19a8b7c6d5e4"),
    ("json_token", '{"token":"t0k3n-value-xyz"}', "t0k3n-value-xyz"),
    ("json_secret", '{"secret": "plain words are secret too"}', "plain words are secret"),
    ("json_authorization", '{"authorization": "Digest abc123xyz"}', "abc123xyz"),
    ("json_client_secret", '{"client_id": "app", "clientSecret": "cs-8d7f6e"}', "cs-8d7f6e"),
    ("json_access_token", '{"access_token": "at-1q2w3e4r", "expires_in": 3600}', "at-1q2w3e4r"),
    ("json_refresh_token", '{"refresh_token": "rt-5t6y7u8i"}', "rt-5t6y7u8i"),
    ("json_camel_api_key", '{"apiKey": "camelKey123"}', "camelKey123"),
    ("json_docker_auth", '{"auths": {"ghcr.io": {"auth": "ZG9ja2VyOnB3ZA=="}}}', "ZG9ja2VyOnB3ZA"),
    ("json_number_pin", '{"password": 12345678}', "12345678"),
    ("json_escaped", '"{\\"api_key\\": \\"esc-k3y-555\\"}"', "esc-k3y-555"),
    ("python_dict_repr", "{'username': 'bob', 'password': 'pyR3pr!'}", "pyR3pr!"),
    ("python_bytes_repr", "{'token': b'bytesT0ken'}", "bytesT0ken"),
    ("ruby_hash", "{ :password => 'rubyPw99' }", "rubyPw99"),
    # --- command lines, netrc, XML
    ("flag_password_space", "mysqladmin --password s3cretFlag status", "s3cretFlag"),
    ("flag_password_eq", "app --password=flagEq9 --verbose", "flagEq9"),
    ("flag_api_key", "cli --api-key ak_1234abcd run", "ak_1234abcd"),
    ("netrc", "machine api.example.com login alice password n3trcPw", "n3trcPw"),
    ("xml_password", "<user>bob</user><password>xmlPw123</password>", "xmlPw123"),
    ("xml_api_key", "<ApiKey>xml-api-key-77</ApiKey>", "xml-api-key-77"),
    # --- vendor tokens recognisable by their prefix alone (no key beside them)
    ("slack_app_level", f"socket mode with {_XAPP}", _XAPP[30:70]),
    ("gitlab_deploy", f"deploy token {_GLDT} for the registry", _GLDT),
    ("docker_hub_pat", f"docker hub {_DOCKER}", _DOCKER),
    ("digitalocean", f"doctl auth init -t {_DIGITALOCEAN}", _DIGITALOCEAN[7:50]),
    ("databricks", f"databricks host, then {_DATABRICKS}", _DATABRICKS),
    ("vault_service", f"vault says {_VAULT}", _VAULT[4:60]),
    ("vault_legacy", f"VAULT_TOKEN={_VAULT_LEGACY} vault kv get secret/x", _VAULT_LEGACY),
    ("terraform_cloud", f"credentials app.terraform.io {_TERRAFORM}", _TERRAFORM[23:70]),
    ("shopify_access", f"shopify admin {_SHOPIFY}", _SHOPIFY),
    ("shopify_shared_secret", f"webhook signing {_SHOPIFY_SS}", _SHOPIFY_SS),
    ("mailgun", f"mailgun api {_MAILGUN}", _MAILGUN),
    ("telegram_bot", f"bot {_TELEGRAM} polls", _TELEGRAM[11:]),
    ("discord_webhook", f"post to {_DISCORD_HOOK}", _DISCORD_HOOK[52:]),
    ("atlassian_api", f"jira cloud {_ATLASSIAN}", _ATLASSIAN[12:100]),
    ("huggingface_org", f"hf org {_HF_ORG}", _HF_ORG),
    ("twilio_api_key", f"twilio {_TWILIO}", _TWILIO),
    ("mailchimp", f"mailchimp {_MAILCHIMP}", _MAILCHIMP),
    ("square_oauth", f"square {_SQUARE}", _SQUARE[7:]),
    ("artifactory", f"jfrog {_ARTIFACTORY}", _ARTIFACTORY[4:50]),
    ("discord_bot", f"discord bot {_DISCORD_BOT}", _DISCORD_BOT),
    # --- passwords in command lines
    ("mysql_p_glued", "mysql -u root -pMyR00tPw shop", "MyR00tPw"),
    ("mysql_p_quoted", "mysql -h db -u app -p'Qu0ted!Pw' -e 'show tables'", "Qu0ted!Pw"),
    ("redis_cli_a", "redis-cli -h cache -a R3disCliPw ping", "R3disCliPw"),
    ("sshpass", "sshpass -p 'Ssh!Pass99' ssh deploy@web1", "Ssh!Pass99"),
    (
        "openssl_pass",
        "openssl pkcs12 -export -in c.pem -passout pass:P12Exp0rt -out c.p12",
        "P12Exp0rt",
    ),
    ("openssl_passin_env", "openssl rsa -in k.pem -passin pass:K3yPassIn -out k2.pem", "K3yPassIn"),
    ("sqlplus", "sqlplus scott/T1gerOra@orcl", "T1gerOra"),
    ("net_use", r"net use Z: \\fs01\share N3tUsePw /user:CORP\alice", "N3tUsePw"),
    ("net_use_user_first", r"net use \\fs01\ipc$ /user:admin Adm1nNetPw", "Adm1nNetPw"),
    (
        "powershell_securestring",
        '$pw = ConvertTo-SecureString "PsS3cure!42" -AsPlainText -Force',
        "PsS3cure!42",
    ),
    (
        "aws_configure_set",
        "aws configure set aws_secret_access_key Wb9kq2Lz7Xr4Tn6Vm1Pd8Hs3Fg5Jc0 --profile ci",
        "Wb9kq2Lz7Xr4Tn6Vm1Pd8Hs3Fg5Jc0",
    ),
    # --- credential files and config lines
    ("pgpass", "db.internal:5432:shop:app:PgP4ssFile\n", "PgP4ssFile"),
    ("pgpass_wildcards", "*:*:*:postgres:Wildc4rdPw", "Wildc4rdPw"),
    (
        "netrc_multiline",
        "machine api.heroku.com\n  login ops@example.com\n  password N3trcMulti\n",
        "N3trcMulti",
    ),
    ("netrc_default", "default login anonymous password An0nNetrc", "An0nNetrc"),
    ("redis_requirepass", "bind 127.0.0.1\nrequirepass R3quirePw\n", "R3quirePw"),
    ("redis_masterauth", "masterauth M4sterAuthPw", "M4sterAuthPw"),
    ("wifi_psk", 'network={\n  ssid="Home"\n  psk="W1fiPsk!23"\n}', "W1fiPsk!23"),
    ("ansible_ssh_pass", "web1 ansible_host=10.0.0.5 ansible_ssh_pass=Ans1bleSsh", "Ans1bleSsh"),
    ("ansible_become_pass", "ansible_become_pass: B3comePw9", "B3comePw9"),
    ("db_pass_env", "DB_PASS=DbP4ssEnv9", "DbP4ssEnv9"),
    ("mail_pw_env", "MAIL_PW=M4ilPw1234", "M4ilPw1234"),
    (
        "npmrc_auth",
        "//registry.npmjs.org/:_auth=bnBtdXNlcjpOcG1QYXNzMQ==",
        "bnBtdXNlcjpOcG1QYXNzMQ",
    ),
    (
        "kubeconfig_client_key",
        "users:\n- name: admin\n  user:\n    client-certificate-data: LS0tLS1CRUdJTiBDRVJU\n"
        f"    client-key-data: {_KUBE_KEY}\n",
        _KUBE_KEY[60:120],
    ),
    (
        "putty_ppk",
        "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nComment: rsa-key-2024\n"
        "Public-Lines: 1\nAAAAB3NzaC1yc2EAAAABJQAAAQEAqz\n"
        f"Private-Lines: 2\n{_PPK}\n{_PPK[::-1]}\nPrivate-MAC: {_r(_HEX, 40, 131)}\n",
        _PPK[:40],
    ),
    (
        "azure_sas",
        "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o&sp=r"
        f"&se=2026-01-01T00:00:00Z&spr=https&sig={_SAS_SIG}",
        _SAS_SIG,
    ),
    # --- session cookies and a password in a sentence
    ("django_sessionid", f"Cookie: csrftoken=abc; sessionid={_SESSIONID}", _SESSIONID),
    ("phpsessid", f"PHPSESSID={_PHPSESSID}; path=/", _PHPSESSID),
    (
        "express_connect_sid",
        f"Set-Cookie: connect.sid={_CONNECT_SID}; HttpOnly",
        _CONNECT_SID[4:36],
    ),
    ("wifi_sentence", "the wifi password is Gu3st!Net for visitors", "Gu3st!Net"),
    ("password_sentence_quoted", 'my password is "swordfish-7" until Friday', "swordfish-7"),
]

_IMG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

LOOKALIKES: list[tuple[str, str]] = [
    ("git_sha", "fixed in commit 3f786850e387550fdab836ed7e6dc881de23001b"),
    ("short_sha", "see 3f78685 and a1b2c3d"),
    ("sha256", "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (
        "sha256_eq",
        "checksum sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    ("md5", "md5: d41d8cd98f00b204e9800998ecf8427e"),
    (
        "docker_digest",
        "image@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ),
    ("uuid", "request id 123e4567-e89b-12d3-a456-426614174000"),
    ("uuid_json", '{"id": "123e4567-e89b-12d3-a456-426614174000", "kind": "fact"}'),
    ("base64_image", f"<img src='{_IMG}'>"),
    ("base64_blob", "payload: SGVsbG8sIFdvcmxkISBUaGlzIGlzIGp1c3QgdGV4dC4="),
    ("reset_prose", "Reset your password via the portal"),
    ("policy_prose", "The password policy requires 12 characters and a symbol."),
    ("manager_prose", "Use a password manager; never reuse a password."),
    ("secret_prose", "The secret: keep it simple and ship small changes."),
    ("token_prose", "Token: the unit of text a model reads."),
    ("auth_prose", "authorization: required for admins only"),
    ("passwords_plural", "Passwords: rotate them every 90 days."),
    ("max_tokens", "set max_tokens=2048 and temperature=0.2"),
    ("usage_tokens", '{"input_tokens": 300, "output_tokens": 40, "total_tokens": 340}'),
    ("token_count", "token_count: 1532, tokenizer: cl100k"),
    ("password_min_length", "PASSWORD_MIN_LENGTH=12 in settings.py"),
    ("none_password", "password=None means no auth on localhost"),
    ("env_placeholder", 'DB_PASSWORD="${DB_PASSWORD}" is read from the vault'),
    ("template_placeholder", "password: <your-password>"),
    ("masked", "api_key: ********"),
    ("pwd_path", "PWD=/home/alice/project"),
    ("clock_time", "Call at 10:30, task id 42"),
    ("url_plain", "Visit https://example.com/docs?page=2&lang=en"),
    ("url_port", "mongodb://localhost:27017/shop"),
    ("scp_path", "git clone git@github.com:org/repo.git"),
    ("email", "alice@example.com wrote 10.0.0.1"),
    ("ipv6", "bind to [2001:db8::1]:8080"),
    ("sklearn", "use sk-learn style fit/predict and sk_learn helpers"),
    ("akia_prose", "AWS key ids start with AKIA and are 20 characters long"),
    ("ghp_prose", "GitHub classic tokens start with ghp_ followed by 36 characters"),
    ("bearer_prose", "The bearer document must be signed by both parties."),
    ("basic_prose", "Basic usage: run make test before pushing."),
    ("basic_word", "Basic authentication is disabled on this server."),
    ("jwt_prose", "A JWT has three base64url parts separated by dots."),
    ("eyj_word", "eyJ is how base64 of '{\"' begins"),
    ("version_yaml", "version: 1.2.3\nname: memkit\nkind: fact"),
    ("primary_key", "primary_key: id, foreign_key: user_id"),
    ("token_type", '{"token_type": "bearer", "expires_in": 3600}'),
    ("css_hex", "color: #ff0000; background: #00ff00"),
    ("cli_double_dash", "pytest -q -x -- tests/test_store.py"),
    ("passwd_file", "check /etc/passwd for the uid"),
    ("python_kwargs", "fit(x, y, random_state=42, n_jobs=-1)"),
    ("secret_santa", "secret santa: draw names on Friday"),
    ("machine_prose", "the machine learning team owns it"),
    ("xml_plain", "<name>bob</name><role>admin</role>"),
    ("auth_method", '{"bank": "Sabadell", "auth": "interactive"}'),
    ("credentials_where", "Credentials: 1Password, vault `acme-web-prod`."),
    ("signature_prose", "signature: J. Smith, on behalf of the board"),
    # --- from code and config: no credential is held here
    ("json_null_password", '{"password": null}'),
    ("json_null_nested", '{"db": {"user": "app", "password": null}, "port": 5432}'),
    ("bearer_env", 'curl -H "Authorization: Bearer $TOKEN" https://api.example.com'),
    ("bearer_angle", "Authorization: Bearer <token>"),
    ("gha_secret", "password: ${{ secrets.DOCKERHUB_TOKEN }}"),
    ("gha_env_token", "env:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n"),
    ("os_environ", 'api_key = os.environ["OPENAI_API_KEY"]'),
    ("environ_get", 'token = os.environ.get("SLACK_TOKEN", "")'),
    ("process_env", "const apiKey = process.env.STRIPE_SECRET_KEY;"),
    ("get_token_call", "token = get_token(session)"),
    ("getpass", "password = getpass.getpass()"),
    ("getpass_bare", "pw = getpass()\npassword = getpass()"),
    ("form_field", "password = forms.CharField(widget=forms.PasswordInput)"),
    ("form_field_class", '<input type="password" class="form-control" name="password">'),
    ("secret_arn", "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf"),
    ("iam_arn", "role arn:aws:iam::123456789012:role/service-role/deploy"),
    ("auth_oauth2", "auth: oauth2"),
    ("auth_method_ldap", "auth: ldap-simple"),
    ("token_type_hint", "token_type_hint=refresh_token"),
    ("config_attr", "self.password = config.password"),
    ("secrets_module", "token = secrets.token_urlsafe(32)"),
    ("password_param_doc", ":param password: the user's password"),
    ("password_none_kwarg", "connect(host, user, password=None)"),
    ("yaml_null", "token: null\nretries: 3"),
    ("empty_env", "API_KEY=\nDEBUG=true"),
    ("sha1_hex", "sha1: 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"),
    ("git_log_line", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8\nAuthor: Dev <d@x.io>"),
    ("uuid_upper", "tenant 6F9619FF-8B86-D011-B42D-00C04FC964FF"),
    (
        "base64_jpeg",
        'src="data:image/jpeg;base64,/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAAMCAgICAgMCAgIDAwMDBAYEBAQEBAgGBgUGCQgKCgkICQkKDA8MCgsOCwkJDRENDg8QEBEQCgwSExIQEw8QEBD/yQ=="',
    ),
    ("password_field_label", '<label for="password">Password</label>'),
    ("mysql_p_prompt", "mysql -u root -p shop"),
    ("ssh_keygen", "ssh-keygen -t ed25519 -C ops@example.com -f ~/.ssh/id_ed25519"),
    ("openssl_env_pass", "openssl rsa -in k.pem -passin env:KEY_PASS -out k2.pem"),
    ("sig_prose", "sig=fig is a plotting alias in our notebooks"),
    ("sessionid_function", "sessionid = request.COOKIES.get('sessionid')"),
]
