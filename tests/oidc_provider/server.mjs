// A real OpenID Connect provider (panva/oidc-provider) for the portal's sign-in tests.
//
// Started by tests/oidc_fixtures.py with its settings in the environment:
//   OIDC_PORT            the port to listen on (127.0.0.1)
//   OIDC_CLIENT_ID       the one client (Toolroom), confidential, client_secret_basic
//   OIDC_CLIENT_SECRET
//   OIDC_REDIRECT_URIS   comma-separated callback URLs Toolroom may ask for
//   OIDC_ACCOUNTS        JSON: {"<login>": {"email": ..., "name": ..., "groups": [...]}, ...}
// The sign-in pages are the library's own development interactions (a login form, then a
// consent form); the login chosen there is the account id, whose claims come from OIDC_ACCOUNTS.
import Provider from 'oidc-provider';

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS || '{}');

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.OIDC_CLIENT_ID,
      client_secret: process.env.OIDC_CLIENT_SECRET,
      redirect_uris: process.env.OIDC_REDIRECT_URIS.split(','),
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const account = accounts[id] || {};
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          preferred_username: id,
          email: account.email || `${id}@example.com`,
          email_verified: true,
          name: account.name || id,
          groups: account.groups || [],
        };
      },
    };
  },
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${issuer}`);
});
